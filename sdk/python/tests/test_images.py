"""Images through the blocking SDK: the list with `host`, importing a root file system (busybox), a
Dockerfile build over it with its log streamed to a callback, booting the result, a failing build's
line and output, what a build FROM the default image `host` answers, a pull with its progress from the
suite's own loopback registry, pull's errors, delete."""

import io
import tarfile

import pytest

import sandlot
from sandlot import Sandbox

from conftest import busybox_rootfs, unique


def _context(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def busybox(server):
    """A tenant with the busybox root file system imported as `bb`, and its client."""
    with sandlot.Client(server.url, server.tenant_key("images")) as c:
        events = []
        images = c.images.import_archive(busybox_rootfs(), name="bb", on_progress=events.append)
        assert [i.name for i in images] == ["bb"] and images[0].owner == "tenant"
        assert events[-1].type == "done" and any(e.type == "unpacked" for e in events)
        yield c


def test_the_list_holds_host_and_imported_images(busybox):
    by_name = {i.name: i for i in busybox.images.list()}
    assert by_name["host"].owner == "builtin"
    assert by_name["bb"].owner == "tenant" and by_name["bb"].size_bytes > 0 and len(by_name["bb"].layers) == 1
    assert busybox.images.get("bb").id == by_name["bb"].id


def test_build_streams_its_log_and_the_image_boots(busybox, tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "FROM bb\n"
        "ENV GREETING=hello\n"
        "COPY motd.txt /etc/motd\n"
        'RUN echo "building as $(id -u)"; echo to-stderr >&2; echo built > /etc/built\n'
        "WORKDIR /srv\n"
    )
    (tmp_path / "motd.txt").write_text("from the context\n")
    name = unique("app")
    log, events = [], []
    image = busybox.images.build(tmp_path, name, on_log=log.append, on_event=events.append)
    assert image.name == name and image.config["working_dir"] == "/srv"
    text = "".join(log)
    assert "Step 1 (line 1): FROM bb" in text and "Step 4 (line 4): RUN" in text
    assert "building as 0\n" in text and "to-stderr\n" in text
    assert [e.fields["index"] for e in events if e.type == "step"] == [0, 1, 2, 3, 4]
    assert events[-1].type == "done"
    with Sandbox.create(image=name, client=busybox) as sbx:
        r = sbx.commands.run("cat /etc/motd /etc/built; echo $GREETING; pwd")
        assert r.stdout == "from the context\nbuilt\nhello\n/srv\n"
    # Unchanged, it rebuilds from the cache without running anything.
    again = []
    busybox.images.build(tmp_path, name, on_event=again.append)
    assert all(e.fields["cached"] for e in again if e.type == "step")
    busybox.images.delete(name)
    with pytest.raises(sandlot.NotFound):
        busybox.images.get(name)


def test_a_failing_run_raises_with_its_line_and_output(busybox):
    ctx = _context({"Dockerfile": "FROM bb\nRUN echo about to fail; exit 3\n"})
    log = []
    with pytest.raises(sandlot.SandlotError) as err:
        busybox.images.build(ctx, unique("broken"), on_log=log.append)
    assert err.value.line == 2 and "about to fail" in (err.value.tail or "")
    assert "about to fail" in err.value.message and "about to fail\n" in "".join(log)
    assert all(i.name != "broken" for i in busybox.images.list())


def test_a_build_from_the_default_image_host_is_refused(busybox):
    ctx = _context({"Dockerfile": "FROM host\nRUN true\n"})
    with pytest.raises(sandlot.SandlotError) as err:
        busybox.images.build(ctx, unique("from-host"))
    assert "host" in err.value.message and err.value.code == "invalid_request"


def test_pull_fetches_from_a_registry_with_progress_and_the_image_boots(busybox, registry):
    events = []
    image = busybox.images.pull(registry.ref, name="pulled", on_progress=events.append)
    assert (image.name, image.reference, image.digest) == ("pulled", registry.ref, registry.manifest_digest)
    assert image.platform == "linux/amd64" and [l.digest for l in image.layers] == [registry.layer_digest]
    kinds = [e.type for e in events]
    assert kinds[0] == "resolved" and kinds[-1] == "done" and "downloaded" in kinds and "unpacked" in kinds
    assert events[0].fields["digest"] == registry.manifest_digest
    assert any(p.endswith(registry.layer_digest) for p in registry.requests)
    with Sandbox.create(image="pulled", client=busybox) as sbx:
        r = sbx.commands.run("pwd; echo $FROM_IMAGE")
        assert r.stdout == "/etc\nyes\n"  # the image's WorkingDir and Env apply
    with pytest.raises(sandlot.NotFound) as err:  # reported in the stream, after its 200
        busybox.images.pull(registry.ref.replace(":1", ":missing"))
    assert err.value.code == "not_found" and "missing" in err.value.message


def test_pull_refuses_a_malformed_reference_before_fetching(busybox):
    with pytest.raises(sandlot.InvalidRequest) as err:
        busybox.images.pull("Not A Reference!!")
    assert err.value.status == 400
