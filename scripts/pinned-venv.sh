# Sourced by the *-venv.sh scripts: the Python venvs of the test suites, made once per machine from
# pinned requirements on PyPI.
#
# pinned_venv NAME REQUIREMENTS CACHE prints CACHE/venv-<hash of REQUIREMENTS and the Python version>,
# making it first if needed: a changed pin makes a new venv (and removes the stale ones); an unchanged
# one costs nothing. A venv records its own path in its scripts, so it is made under its final name;
# the `.complete` marker, written last, is what says an install finished. NAME prefixes its errors.
pinned_venv() {
    local name=$1 req=$2 cache=$3 python=${PYTHON:-python3} hash venv
    hash=$( (cat "$req"; "$python" --version) | sha256sum | cut -c1-16)
    venv=$cache/venv-$hash
    if [ ! -f "$venv/.complete" ]; then
        mkdir -p "$cache"
        rm -rf "$venv"
        "$python" -m venv "$venv" >&2
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2 || {
            rm -rf "$venv"
            echo "$name: installing $req from PyPI failed" >&2
            return 1
        }
        touch "$venv/.complete"
        find "$cache" -maxdepth 1 -name 'venv-*' ! -name "venv-$hash" -exec rm -rf {} +
    fi
    echo "$venv"
}

# install_sdk_offline NAME VENV installs the Python SDK from this checkout's sdk/python into VENV with
# no network (`pip install --no-index --no-build-isolation`), as README's offline install says. It is
# reinstalled on every call (a second, offline and cheap), so the venv always holds this checkout's
# code. Built from a copy, so setuptools' build directory and egg-info land outside the checkout.
install_sdk_offline() {
    local name=$1 venv=$2 src
    src=$(mktemp -d)
    cp -r sdk/python/. "$src"
    rm -rf "$src/tests" "$src/build" "$src"/*.egg-info
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-build-isolation --force-reinstall \
        --no-deps "$src" >&2 || {
        rm -rf "$src"
        echo "$name: installing the SDK from sdk/python offline failed" >&2
        return 1
    }
    rm -rf "$src"
}
