#!/usr/bin/env bash
# Installs what the interop tests (and the compose deployment test) need, next to the
# project venv:
#
#   .venv-interop-cpp2/        PyPI rocketmq-python-cvs==2.1.0.3 (RocketMQ C++ client 2.1.0)
#   .venv-interop-cpp1/        PyPI rocketmq==0.4.4              (RocketMQ C++ client 1.x)
#   .venv-interop-py5/         PyPI rocketmq-python-client==5.1.2 (the official 5.x gRPC SDK; rmq proxy
#                              tests: tests/interop/test_python5_*.py, needs Python 3.8+)
#   tests/interop/node/node_modules/   npm ali-ons@3.12.0 (from the committed package-lock.json)
#   tests/interop/drivers/node5/node_modules/   npm rocketmq-client-nodejs@1.0.8, the official 5.x
#                              Node SDK (rmq proxy tests: tests/proxy/test_node5_client.py; node >= 16.19)
#   java                       Debian default-jre-headless, only if no Java 17+ is on PATH
#                              (the interop tests and PySpark 4 in tests/spark)
#   javac                      Debian default-jdk-headless, only if no `javac` is on PATH
#                              (tests/interop/test_java_acl.py, test_java_tls.py compile Java client programs)
#   prometheus                 Debian prometheus, only if no `prometheus` is on PATH
#                              (tests/integration/test_compose_deployment.py runs it)
#   etcd                       Debian etcd-server, only if no `etcd` is on PATH
#                              (tests/cluster/etcd_util.py runs etcd clusters for the controllers' tests)
#
# Idempotent and quiet: work already done is skipped (stamp files + cheap checks),
# so a second run takes about a second; it prints nothing unless something fails,
# then says what and shows the tail of the failing command's output.
# Debian packages are installed with apt-get only when missing (as root, or via
# sudo when not root). Every client is load-tested at the end of each run.
#
# Environment:
#   PYTHON=python3           interpreter the interop venvs are made from (any CPython 3.7+;
#                            the bindings are ctypes over a bundled librocketmq.so)
#   RMQ_SKIP_INTEROP_DEPS=1  do nothing (e.g. a machine without network)
#   RMQ_INSTALL_VERBOSE=1    say what is being done
set -euo pipefail

[[ "${RMQ_SKIP_INTEROP_DEPS:-}" == 1 ]] && exit 0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
NODE_DIR="$ROOT/tests/interop/node"
NODE5_DIR="$ROOT/tests/interop/drivers/node5"
CPP2_VENV="$ROOT/.venv-interop-cpp2"
CPP2_SPEC="rocketmq-python-cvs==2.1.0.3"
CPP1_VENV="$ROOT/.venv-interop-cpp1"
CPP1_SPEC="rocketmq==0.4.4"
PY5_VENV="$ROOT/.venv-interop-py5"
PY5_SPEC="rocketmq-python-client==5.1.2"
STAMP_NAME=".rmq-interop-stamp"

LOG="$(mktemp -t rmq-install-deps.XXXXXX)"
CHECK_HOME="$(mktemp -d -t rmq-install-home.XXXXXX)"
trap 'rm -rf "$LOG" "$CHECK_HOME"' EXIT

say() { [[ "${RMQ_INSTALL_VERBOSE:-}" == 1 ]] && echo "install_test_deps: $*" >&2 || true; }
die() { echo "install_test_deps: ERROR: $*" >&2; exit 1; }

# run DESCRIPTION CMD...: run quietly; on failure show what failed and the output tail.
run() {
    local what="$1"; shift
    say "$what"
    if ! "$@" >"$LOG" 2>&1; then
        echo "install_test_deps: ERROR: $what failed: $*" >&2
        grep -v "is ignored: it is neither a file nor a directory" "$LOG" | tail -n 40 | sed 's/^/  | /' >&2
        exit 1
    fi
}

# ----------------------------------------------------------------------------- apt
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else SUDO=(__no_root__); fi
fi
APT_UPDATED=0

apt_missing() {  # print the packages (args) that are not installed
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}

apt_install() {  # apt_install PKG...: install only what is missing
    local missing
    missing=$(apt_missing "$@")
    [[ -z "$missing" ]] && return 0
    command -v apt-get >/dev/null 2>&1 || die "need Debian packages: $missing (no apt-get here: install them by hand)"
    [[ "${SUDO[0]:-}" == __no_root__ ]] && die "need Debian packages: $missing (not root and no sudo)"
    if [[ $APT_UPDATED == 0 ]]; then
        run "apt-get update" "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    # shellcheck disable=SC2086
    run "apt-get install $missing" "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends $missing
}

# Debian package that provides a shared library a bundled librocketmq.so needs.
lib_package() {
    case "$1" in
        libz.so.1) echo zlib1g ;;
        libstdc++.so.6) echo libstdc++6 ;;
        libgcc_s.so.1) echo libgcc-s1 ;;
        libc.so.6|libm.so.6|libdl.so.2|librt.so.1|libpthread.so.0|ld-linux-x86-64.so.2) echo libc6 ;;
        *) echo "" ;;
    esac
}

# ----------------------------------------------------------------------------- python venvs
python_ok() {
    command -v "$PY" >/dev/null 2>&1 || die "no $PY on PATH (set PYTHON=/path/to/python3)"
    if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        # Debian's own python3 splits venv/ensurepip into python3-venv.
        [[ "$(command -v "$PY")" == /usr/bin/* ]] || die "$PY cannot create venvs (no venv/ensurepip module)"
        apt_install python3-venv
    fi
}

# ensure_venv DIR SPEC: DIR is a venv with exactly SPEC installed (stamp-checked).
ensure_venv() {
    local dir="$1" spec="$2" stamp="$1/$STAMP_NAME"
    if [[ -x "$dir/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$spec" ]]; then
        return 0
    fi
    python_ok
    rm -rf "$dir"
    run "create $(basename "$dir")" "$PY" -m venv "$dir"
    # rocketmq-python-cvs is an sdist (setup.py + prebuilt librocketmq.so): pip
    # builds a wheel with setuptools/wheel fetched into its build isolation.
    run "pip install $spec into $(basename "$dir")" \
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$spec"
    echo "$spec" >"$stamp"
}

# check_native DIR: every shared library (and symbol version) librocketmq.so needs resolves.
check_native() {
    local dir="$1" so out missing pkgs="" lib pkg
    so=$(ls "$dir"/lib/python3*/site-packages/rocketmq/librocketmq.so 2>/dev/null | head -n1)
    [[ -n "$so" ]] || die "$(basename "$dir"): rocketmq/librocketmq.so not found in the installed package"
    out=$(ldd "$so" 2>&1 || true)
    if grep -q "version .* not found" <<<"$out"; then
        die "$(basename "$dir"): $so needs a newer C/C++ runtime than this system has:
$(grep 'not found' <<<"$out")"
    fi
    missing=$(awk '/=> not found/ {print $1}' <<<"$out")
    [[ -z "$missing" ]] && return 0
    for lib in $missing; do
        pkg=$(lib_package "$lib")
        [[ -n "$pkg" ]] || die "$(basename "$dir"): $so needs $lib, which no known Debian package provides"
        pkgs="$pkgs $pkg"
    done
    # shellcheck disable=SC2086
    apt_install $pkgs
    out=$(ldd "$so" 2>&1 || true)
    if grep -q "not found" <<<"$out"; then
        die "$(basename "$dir"): still unresolved after installing$pkgs:
$(grep 'not found' <<<"$out")"
    fi
}

# verify_venv DIR DIST: the binding imports and a Producer can be created.
verify_venv() {
    local dir="$1" dist="$2"
    run "load-test the RocketMQ binding in $(basename "$dir")" \
        env HOME="$CHECK_HOME" "$dir/bin/python" -c "
import sys
from importlib import metadata
v = metadata.version('$dist')
import rocketmq.client as c
p = c.Producer('rmq-install-check')
p.set_namesrv_addr('127.0.0.1:9876')
print('ok', '$dist', v)
sys.stdout.flush()
import os; os._exit(0)   # skip the C++ destructors
"
}

# verify_py5 DIR: the 5.x SDK imports and builds its client objects (no server needed).
verify_py5() {
    local dir="$1"
    run "load-test the 5.x SDK in $(basename "$dir")" \
        env HOME="$CHECK_HOME" "$dir/bin/python" -c "
from importlib import metadata
v = metadata.version('rocketmq-python-client')
assert v == '5.1.2', v
from rocketmq import ClientConfiguration, Credentials, Message, Producer, SimpleConsumer
ClientConfiguration('127.0.0.1:8081', Credentials())
print('ok rocketmq-python-client', v)
"
}

# ----------------------------------------------------------------------------- node
# npm_ci DIR PACKAGE: DIR/node_modules installed from DIR/package-lock.json (stamp-checked)
npm_ci() {
    local dir="$1" pkg="$2" major want have=""
    major=$(node -p 'process.versions.node.split(".")[0]')
    [[ -f "$dir/package-lock.json" ]] || die "missing $dir/package-lock.json"
    want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1) node$major"
    [[ -f "$dir/node_modules/$STAMP_NAME" ]] && have=$(cat "$dir/node_modules/$STAMP_NAME")
    if [[ "$have" != "$want" || ! -d "$dir/node_modules/$pkg" ]]; then
        (cd "$dir" && run "npm ci in ${dir#"$ROOT"/}" npm ci --no-audit --no-fund --loglevel=error)
        echo "$want" >"$dir/node_modules/$STAMP_NAME"
    fi
}

ensure_node() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt_install nodejs npm
    fi
    local major
    major=$(node -p 'process.versions.node.split(".")[0]')
    [[ "$major" -ge 10 ]] || die "node $(node --version) is too old for ali-ons (need >= 10)"
    npm_ci "$NODE_DIR" ali-ons
    (cd "$NODE_DIR" && run "load-test ali-ons" node -e "
const ons = require('ali-ons');
const v = require('ali-ons/package.json').version;
if (v !== '3.12.0') { console.error('ali-ons ' + v + ' installed, 3.12.0 expected'); process.exit(1); }
for (const k of ['Producer', 'Consumer', 'Message']) if (typeof ons[k] !== 'function') process.exit(1);
")
}

# the 5.x Node SDK (gRPC) beside ali-ons: its own package-lock.json, node >= 16.19
ensure_node5() {
    if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 16 || (a === 16 && b >= 19) ? 0 : 1)'; then
        die "node $(node --version) is too old for rocketmq-client-nodejs (need >= 16.19)"
    fi
    npm_ci "$NODE5_DIR" rocketmq-client-nodejs
    (cd "$NODE5_DIR" && run "load-test rocketmq-client-nodejs" node -e "
const sdk = require('rocketmq-client-nodejs');
const v = require('rocketmq-client-nodejs/package.json').version;
if (v !== '1.0.8') { console.error('rocketmq-client-nodejs ' + v + ' installed, 1.0.8 expected'); process.exit(1); }
for (const k of ['Producer', 'SimpleConsumer']) if (typeof sdk[k] !== 'function') process.exit(1);
")
}

# ----------------------------------------------------------------------------- java
# Major version of the java on PATH (0 if none): PySpark 4 (tests/spark) needs 17+.
java_major() {
    command -v java >/dev/null 2>&1 || { echo 0; return; }
    java -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n1
}

ensure_java() {
    if [[ "$(java_major)" -lt 17 ]]; then
        apt_install default-jre-headless
        [[ "$(java_major)" -ge 17 ]] || die "need Java 17+ on PATH for Spark (have: $(java -version 2>&1 | head -n1))"
    fi
    # tests/interop/test_java_acl.py and test_java_tls.py compile Java 4.9.8 client programs (javac)
    command -v javac >/dev/null 2>&1 || apt_install default-jdk-headless
    command -v javac >/dev/null 2>&1 || die "installed default-jdk-headless but still no javac on PATH"
}

# ----------------------------------------------------------------------------- prometheus
ensure_prometheus() {
    command -v prometheus >/dev/null 2>&1 && return 0
    apt_install prometheus
    command -v prometheus >/dev/null 2>&1 || die "installed prometheus but still no prometheus on PATH"
    run "check prometheus" prometheus --version
}

# ----------------------------------------------------------------------------- etcd
ensure_etcd() {
    command -v etcd >/dev/null 2>&1 && return 0
    apt_install etcd-server
    command -v etcd >/dev/null 2>&1 || die "installed etcd-server but still no etcd on PATH"
    run "check etcd" etcd --version
}

# ----------------------------------------------------------------------------- main
ensure_venv "$CPP2_VENV" "$CPP2_SPEC"
check_native "$CPP2_VENV"
verify_venv "$CPP2_VENV" rocketmq-python-cvs

ensure_venv "$CPP1_VENV" "$CPP1_SPEC"
check_native "$CPP1_VENV"
verify_venv "$CPP1_VENV" rocketmq

ensure_venv "$PY5_VENV" "$PY5_SPEC"
verify_py5 "$PY5_VENV"

ensure_node
ensure_node5
ensure_java
ensure_prometheus
ensure_etcd
say "all test dependencies present"
