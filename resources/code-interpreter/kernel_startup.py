"""Run in each python kernel at start (ipython_kernel_config.py): the display formatters the
e2b-code-interpreter SDK reads, as E2B's template registers them (template/startup_scripts there):

- `e2b/data`: a pandas DataFrame as {column: [values]} (the SDK's `result.data`);
- `e2b/chart`: a matplotlib Figure as E2B's chart description, from e2b-charts (`result.chart`);
- `application/json`: lists and dicts through orjson, so numpy values and non-string keys serialize;
- PIL: `Image.save(path)` also displays the image, and `Image.show()` opens no viewer.

A kernel's first cell must not pay for pandas, matplotlib or PIL: the formatters look in sys.modules
(a DataFrame or Figure cannot exist before its library was imported) and PIL is patched by an import
hook when the user's code first imports PIL.Image.
"""

import importlib.abc
import importlib.util
import sys

import IPython
from IPython.core.formatters import BaseFormatter, JSONFormatter
from traitlets import ObjectName, Unicode


class DataFrameFormatter(BaseFormatter):
    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict, str)

    def __call__(self, obj):
        pandas = sys.modules.get("pandas")
        if pandas is None or not isinstance(obj, pandas.DataFrame):
            return super().__call__(obj)
        columns = obj.to_dict(orient="list")
        for name, values in columns.items():
            columns[name] = [v.isoformat() if isinstance(v, pandas.Timestamp) else v for v in values]
        return columns


class ChartFormatter(BaseFormatter):
    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict, str)

    def __call__(self, obj):
        if "matplotlib" not in sys.modules:
            return super().__call__(obj)
        from matplotlib.figure import Figure

        if not isinstance(obj, Figure):
            return super().__call__(obj)
        from e2b_charts import chart_figure_to_dict

        try:
            return chart_figure_to_dict(obj)
        except Exception:  # noqa: BLE001 - a figure the extractor does not understand still shows as a PNG
            return {}


class OrjsonFormatter(JSONFormatter):
    def __call__(self, obj):
        if isinstance(obj, (list, dict)):
            try:
                import orjson

                options = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
                return orjson.loads(orjson.dumps(obj, option=options)), {"expanded": True}
            except TypeError:
                pass
        return super().__call__(obj)


def patch_pil(image_module) -> None:
    """`Image.save(path)` displays the image too (as E2B's template does); `show()` opens no viewer
    (there is no display), IPython's viewer shows it as a result instead."""
    from IPython.display import display
    from PIL.ImageShow import UnixViewer

    UnixViewer.show_file = lambda self, path, **options: 0
    original_save = image_module.Image.save

    def save(image, fp, format=None, **params):
        if isinstance(fp, str):
            display(image)
        return original_save(image, fp, format, **params)

    image_module.Image.save = save


class PatchAfterImport(importlib.abc.MetaPathFinder):
    """Calls `patch(module)` right after `name` is first imported, whoever imports it."""

    def __init__(self, name, patch):
        self.name = name
        self.patch = patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module
        patch = self.patch

        def exec_module(module):
            loader_exec(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


ip = IPython.get_ipython()
formatters = ip.display_formatter.formatters
formatters["e2b/data"] = DataFrameFormatter(parent=ip.display_formatter)
formatters["e2b/chart"] = ChartFormatter(parent=ip.display_formatter)
formatters["application/json"] = OrjsonFormatter(parent=ip.display_formatter)
if "PIL.Image" in sys.modules:
    patch_pil(sys.modules["PIL.Image"])
else:
    sys.meta_path.insert(0, PatchAfterImport("PIL.Image", patch_pil))
