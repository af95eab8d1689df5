# The python kernel's configuration (server.py starts ipykernel with --config=<this file>), as E2B's
# template configures its kernel: plain tracebacks for programs to read, sequences shown in full.
import os

c = get_config()  # noqa: F821 - traitlets provides it to config files
c.InteractiveShell.colors = "NoColor"
c.PlainTextFormatter.max_seq_length = 0
# The formatters for result.data, result.chart and JSON, and PIL's save-displays, in a namespace of
# their own (run_path), so the user's globals hold none of their names.
c.IPKernelApp.exec_lines = [
    "import runpy as __sandlot_runpy; __sandlot_runpy.run_path(%r, run_name='sandlot_kernel_startup'); "
    "del __sandlot_runpy" % os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_startup.py")
]
