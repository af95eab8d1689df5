"""The Dockerfile corpus the build reference test (test_builds.py) builds twice: with sandlot and with
Debian's buildah, from the same local base image (`base`: Debian's static busybox in a merged-/usr
tree with the files the cases touch, see test_builds.make_base), and compares entry by entry.

Each case is a Dockerfile and the context beside it. A context entry is a text (a file, mode 0644), or
`File(text, mode)`, `Link(target)` (a symbolic link), `Hard(target)` (a hard link to another entry),
`Dir(mode)`. The cases are what Dockerfiles people write do: COPY and ADD into and onto directories,
globs, owners and modes, WORKDIR and ENV in paths, USER before RUN, ARG before FROM, several stages,
.dockerignore, links in the context, and RUN steps that delete what lower layers hold (whiteouts).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class File:
    text: str
    mode: int = 0o644


@dataclass(frozen=True)
class Link:
    target: str


@dataclass(frozen=True)
class Hard:
    target: str


@dataclass(frozen=True)
class Dir:
    mode: int = 0o755


TREE = {
    "src/main.py": "print('main')\n",
    "src/util.py": "X = 1\n",
    "src/pkg/__init__.py": "",
    "src/pkg/data.json": '{"a": 1}\n',
    "README.md": "# app\n",
}

CASES = {
    # The base alone: what importing it and booting it changes, counted once for every case.
    "base": ("FROM base\n", {}),
    # --- COPY of one file: into a directory, onto a path, the rule for trailing slashes.
    "copy-file-into-workdir-dot": ("FROM base\nWORKDIR /app\nCOPY requirements.txt .\n", {"requirements.txt": "flask\n"}),
    "copy-file-into-workdir-then-run": (
        "FROM base\nWORKDIR /srv/app\nCOPY app.py .\nRUN cat app.py > copied.txt\n",
        {"app.py": "print(1)\n"},
    ),
    "copy-file-onto-existing-dir": ("FROM base\nCOPY tool /usr/local/bin\n", {"tool": File("#!/bin/sh\necho tool\n", 0o755)}),
    "copy-file-onto-existing-dir-slash": ("FROM base\nCOPY tool /opt/\n", {"tool": "x\n"}),
    "copy-file-to-new-name": ("FROM base\nCOPY a.txt /opt/renamed.txt\n", {"a.txt": "a\n"}),
    "copy-file-to-missing-dir-slash": ("FROM base\nCOPY a.txt /new/deep/dir/\n", {"a.txt": "a\n"}),
    "copy-file-to-missing-path": ("FROM base\nCOPY a.txt /new/file\n", {"a.txt": "a\n"}),
    "copy-file-over-existing-file": ("FROM base\nCOPY motd /etc/motd\n", {"motd": "welcome\n"}),
    "copy-file-to-root": ("FROM base\nCOPY a.txt /\n", {"a.txt": "a\n"}),
    "copy-file-through-symlinked-dir": ("FROM base\nCOPY tool /bin/\n", {"tool": File("echo\n", 0o755)}),
    # --- COPY of directories.
    "copy-dir-to-new-dir": ("FROM base\nCOPY src /app/src\n", TREE),
    "copy-dir-contents-into-existing": ("FROM base\nCOPY src/ /usr/local/lib/\n", TREE),
    "copy-dot": ("FROM base\nWORKDIR /app\nCOPY . .\n", TREE),
    "copy-dot-absolute": ("FROM base\nCOPY . /app\n", TREE),
    "copy-several-sources": ("FROM base\nCOPY README.md src/main.py /dst/\n", TREE),
    "copy-empty-dir": ("FROM base\nCOPY empty /e\n", {"empty": Dir(), "keep": "k\n"}),
    "copy-dir-modes": (
        "FROM base\nCOPY tree /t\n",
        {"tree": Dir(0o750), "tree/private": File("p\n", 0o600), "tree/run.sh": File("r\n", 0o755),
         "tree/sub": Dir(0o700), "tree/sub/setuid": File("s\n", 0o4755)},
    ),
    # --- Globs.
    "glob-star": ("FROM base\nCOPY *.txt /dst/\n", {"a.txt": "a\n", "b.txt": "b\n", "c.md": "c\n"}),
    "glob-question": ("FROM base\nCOPY file?.cfg /dst/\n", {"file1.cfg": "1\n", "file2.cfg": "2\n", "file10.cfg": "10\n"}),
    "glob-class": ("FROM base\nCOPY [ab].txt /dst/\n", {"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"}),
    "glob-in-dir": ("FROM base\nCOPY src/*.py /dst/\n", TREE),
    "glob-matching-dirs": ("FROM base\nCOPY s* /dst/\n", {**TREE, "setup.cfg": "[x]\n"}),
    # --- Owners and modes.
    "chown-numeric": ("FROM base\nCOPY --chown=1000:1000 a.txt /home/\n", {"a.txt": "a\n"}),
    "chown-uid-only": ("FROM base\nCOPY --chown=1234 a.txt /opt/\n", {"a.txt": "a\n"}),
    "chown-dir": ("FROM base\nCOPY --chown=2000:3000 src /app\n", TREE),
    "chown-names": (
        "FROM base\nRUN echo 'crew:x:1500:' >> /etc/group && echo 'app:x:1501:1500::/home/app:/bin/sh' >> /etc/passwd "
        "&& mkdir -p /home/app\n"
        "COPY --chown=app:crew a.txt /home/app/\nCOPY --chown=app b.txt /home/app/\n",
        {"a.txt": "a\n", "b.txt": "b\n"},
    ),
    "chmod-file": ("FROM base\nCOPY --chmod=0755 run.sh /usr/local/bin/\n", {"run.sh": "#!/bin/sh\n"}),
    "chmod-dir": ("FROM base\nCOPY --chmod=700 src /secret\n", TREE),
    "chmod-and-chown": ("FROM base\nCOPY --chown=7:7 --chmod=640 a.txt /etc/a.conf\n", {"a.txt": "a\n"}),
    "context-modes-kept": (
        "FROM base\nCOPY . /ctx\n",
        {"private": File("p\n", 0o600), "exec": File("e\n", 0o755), "group": File("g\n", 0o664)},
    ),
    # --- ADD of local files.
    "add-file": ("FROM base\nADD a.txt /added/\n", {"a.txt": "a\n"}),
    "add-dir": ("FROM base\nADD src /added\n", TREE),
    # --- WORKDIR, ENV and ARG in paths.
    "workdir-relative-chain": ("FROM base\nWORKDIR /a\nWORKDIR b\nWORKDIR c\nCOPY f .\n", {"f": "f\n"}),
    "workdir-only": ("FROM base\nWORKDIR /made/by/workdir\n", {}),
    "workdir-then-run": ("FROM base\nWORKDIR /w\nRUN pwd > where\n", {}),
    "env-in-dest": ("FROM base\nENV DIR=/opt/app\nCOPY f $DIR/\n", {"f": "f\n"}),
    "env-braces-in-dest": ("FROM base\nENV D=/x\nCOPY f ${D}/y\n", {"f": "f\n"}),
    "env-in-workdir": ("FROM base\nENV APP=/srv/env\nWORKDIR $APP\nCOPY f .\n", {"f": "f\n"}),
    "arg-in-dest": ("FROM base\nARG DEST=/argdest\nCOPY f ${DEST}/\n", {"f": "f\n"}),
    "arg-before-from": ("ARG BASE=base\nFROM ${BASE}\nARG BASE\nRUN echo \"$BASE\" > /base-name\n", {}),
    "env-seen-by-run": ("FROM base\nENV GREETING=hello\nRUN echo \"$GREETING\" > /greeting\n", {}),
    # --- USER before RUN.
    "user-name-then-run": (
        "FROM base\nRUN echo 'worker:x:1600:1600::/home/worker:/bin/sh' >> /etc/passwd && mkdir -p /home/worker "
        "&& chown 1600:1600 /home/worker\nUSER worker\nRUN touch /var/tmp/by-worker && mkdir /home/worker/made\n",
        {},
    ),
    "user-numeric-then-run": ("FROM base\nUSER 1234:1234\nRUN touch /var/tmp/by-1234\n", {}),
    "user-then-copy": ("FROM base\nUSER 1234\nCOPY a.txt /opt/\n", {"a.txt": "a\n"}),
    # --- RUN steps that delete, replace and link (whiteouts and opaque directories).
    "run-deletes": ("FROM base\nRUN rm -rf /usr/share/doc /etc/motd /var/cache/debconf\n", {}),
    "run-replaces-dir": (
        "FROM base\nCOPY src /opt/src\nRUN rm -rf /opt/src && mkdir /opt/src && echo new > /opt/src/new\n",
        TREE,
    ),
    "run-file-becomes-dir": ("FROM base\nRUN rm /etc/motd && mkdir /etc/motd && touch /etc/motd/inside\n", {}),
    "run-links": (
        "FROM base\nRUN ln -s /etc/hostname /linked && ln /etc/debian_version /hard && mkfifo /fifo\n",
        {},
    ),
    # A sandbox's /tmp is a tmpfs of its own: the image's /tmp is not what its sandboxes see (a build
    # step's sandbox keeps /tmp in its layer, so `COPY x /tmp/` then `RUN sh /tmp/x` works).
    "run-writes-tmp": ("FROM base\nCOPY x /tmp/x\nRUN cat /tmp/x > /from-tmp && echo y > /tmp/y\n", {"x": "x\n"}),
    "run-exec-form": ('FROM base\nRUN ["sh", "-c", "echo exec > /exec-form"]\n', {}),
    "run-chmod-chown": ("FROM base\nRUN chmod 0700 /opt && chown 5:5 /opt && chmod u+s /usr/bin/env\n", {}),
    # /etc is in every sandbox's writable layer (its generated files): it must still show the image's.
    "run-chmod-etc": ("FROM base\nRUN chmod 0750 /etc && chown 0:7 /etc\n", {}),
    # --- Links in the context.
    "context-symlink-in-dir": ("FROM base\nCOPY tree /t\n", {"tree/target.txt": "t\n", "tree/link": Link("target.txt"), "tree/abs": Link("/etc/passwd")}),
    "context-symlink-as-source": ("FROM base\nCOPY link /copied\n", {"target.txt": "t\n", "link": Link("target.txt")}),
    "context-hardlinks": ("FROM base\nCOPY tree /t\n", {"tree/one": "same\n", "tree/two": Hard("tree/one")}),
    # --- .dockerignore.
    "dockerignore-names": (
        "FROM base\nCOPY . /app\n",
        {**TREE, "debug.log": "l\n", "secret/key": "k\n", ".dockerignore": "*.log\nsecret\n"},
    ),
    "dockerignore-exception": (
        "FROM base\nCOPY . /app\n",
        {**TREE, "NOTES.md": "n\n", ".dockerignore": "*.md\n!README.md\n"},
    ),
    "dockerignore-doublestar": (
        "FROM base\nCOPY . /app\n",
        {**TREE, "src/main.pyc": "c", "src/pkg/x.pyc": "c", ".dockerignore": "**/*.pyc\n"},
    ),
    # --- Several stages.
    "stages-copy-from-name": (
        "FROM base AS build\nRUN echo built > /out.txt\nFROM base\nCOPY --from=build /out.txt /artifact.txt\n",
        {},
    ),
    "stages-copy-from-index": (
        "FROM base\nRUN mkdir -p /dist && echo one > /dist/a && echo two > /dist/b\n"
        "FROM base\nCOPY --from=0 /dist /dist\n",
        {},
    ),
    "stages-copy-dir-into": (
        "FROM base AS docs\nFROM base\nCOPY --from=docs /usr/share/doc/bash/ /docs/\n",
        {},
    ),
    "stages-owners-kept": (
        "FROM base AS build\nRUN mkdir /out && echo x > /out/f && chown -R 1000:1000 /out && chmod 0640 /out/f\n"
        "FROM base\nCOPY --from=build /out /out\n",
        {},
    ),
    "stages-from-stage": (
        "FROM base AS one\nRUN echo one > /one\nFROM one AS two\nRUN echo two > /two\nFROM two\nRUN echo three > /three\n",
        {},
    ),
    "stages-unused-stage": ("FROM base AS unused\nRUN echo never > /never\nFROM base\nRUN echo kept > /kept\n", {}),
    "stages-copy-from-chown": (
        "FROM base AS build\nRUN echo x > /made\nFROM base\nCOPY --from=build --chown=42:42 /made /made\n",
        {},
    ),
    # --- Long names.
    "long-names": (
        "FROM base\nCOPY . /long/\n",
        {("d" * 60 + "/") * 3 + "f" * 200: "deep\n", "n" * 255: "long\n"},
    ),
}
