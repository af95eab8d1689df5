"""Who a context runs as (server.py's identity_for and may_write), decided from mode bits the test
makes up: the runner started as root gives each context to `user` where `user` may write, and keeps
root where only root may (cwd=/root)."""

import os
import stat
import sys
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "resources", "code-interpreter"))
import server  # noqa: E402

USER = server.Identity("user", 1000, 1000, [1000, 27], "/home/user")
ROOT = server.Identity("root", 0, 0, [0], "/root")


def tree(**modes):
    """An os.stat stand-in: path -> (mode, uid, gid)."""
    def st_of(path):
        mode, uid, gid = modes[path]
        return SimpleNamespace(st_mode=stat.S_IFDIR | mode, st_uid=uid, st_gid=gid)
    return st_of


FS = tree(**{
    "/": (0o755, 0, 0),
    "/root": (0o700, 0, 0),
    "/home": (0o755, 0, 0),
    "/home/user": (0o755, 1000, 1000),
    "/tmp": (0o1777, 0, 0),
    "/srv": (0o755, 0, 0),
    "/srv/team": (0o775, 0, 27),
})


@pytest.mark.parametrize("path, allowed", [
    ("/home/user", True),   # its own home
    ("/tmp", True),         # world-writable
    ("/srv/team", True),    # a group it is in may write
    ("/root", False),       # root's alone
    ("/srv", False),        # may enter, may not write
])
def test_user_may_write_where_the_mode_bits_say(path, allowed):
    assert server.may_write(FS, path, USER) is allowed


def test_a_directory_under_one_it_cannot_enter_is_refused():
    fs = tree(**{"/": (0o755, 0, 0), "/root": (0o700, 0, 0), "/root/open": (0o777, 0, 0)})
    assert not server.may_write(fs, "/root/open", USER)


def test_root_may_write_anywhere():
    assert server.may_write(FS, "/root", ROOT)


def test_popen_args_drop_only_when_the_identity_differs():
    me = server.Identity("me", os.geteuid(), os.getegid(), [os.getegid()], "/")
    assert me.popen_args() == {}
    other = server.Identity("user", os.geteuid() + 1, os.getegid() + 1, [7], "/home/user")
    assert other.popen_args() == {"user": os.geteuid() + 1, "group": os.getegid() + 1, "extra_groups": [7]}


def test_the_environment_is_the_identitys_login():
    env = USER.env({"PATH": "/usr/bin", "HOME": "/root", "USER": "root"})
    assert env == {"PATH": "/usr/bin", "HOME": "/home/user", "USER": "user", "LOGNAME": "user"}


def test_a_root_server_gives_a_context_to_user_unless_only_root_may_write_there(monkeypatch):
    monkeypatch.setattr(server.os, "geteuid", lambda: 0)
    monkeypatch.setattr(server.pwd, "getpwuid", lambda uid: SimpleNamespace(pw_name="root"))
    monkeypatch.setattr(server.Identity, "of", classmethod(lambda cls, name: USER if name == "user" else ROOT))
    assert server.identity_for("/home/user", FS) is USER
    assert server.identity_for("/tmp", FS) is USER
    assert server.identity_for("/root", FS) is ROOT
    assert server.identity_for("/srv", FS) is ROOT


@pytest.mark.skipif(os.geteuid() == 0, reason="the unprivileged case; this test runs as root")
def test_a_server_that_is_not_root_runs_every_context_as_itself():
    assert server.identity_for("/", FS).uid == os.geteuid()


def test_r_strings_cannot_be_broken_out_of():
    assert server.r_string('a"b\\c\n') == '"a\\U{22}b\\U{5c}c\\U{a}"'
    assert server.r_string("é") == '"\\U{e9}"'
