"""Checks deploy/Dockerfile for what hadolint does not (README: Operations,
"Container image"). Usage:
python3 dockerfile_check.py DOCKERFILE [DOCKERIGNORE [PGO_SCRIPT]].
Prints one line per problem and exits 1 if there is any.

- the build stage runs exactly `bash deploy/pgo.sh` (the profile-guided
  build of the `dist` profile, the release profile whole-program optimized,
  what the overhead benchmark measures) and strips what it builds,
  target/pgo/dist/tokenclock, the binary the runtime stage copies;
- deploy/pgo.sh (PGO_SCRIPT): each of its cargo builds is `--profile dist
  --locked`, the second reads the profile (`-Cprofile-use`) and builds into
  target/pgo;
- the runtime stage is distroless cc (:nonroot) or debian bookworm-slim, and
  its last USER is the numeric non-root 65532 (a name cannot be checked by
  the kubelet's runAsNonRoot);
- it exposes 8080 and 9464, ENTRYPOINT ["tokenclock"] and CMD in exec form;
- it sets no TOKENCLOCK_* variable (the environment would win over the
  mounted config file);
- .dockerignore keeps target/ out of the build context, and .cargo/ in it
  (.cargo/config.toml sets how jemalloc is built).
"""
import json
import re
import sys

# What deploy/pgo.sh builds, relative to the build stage's WORKDIR (/src).
BINARY = "target/pgo/dist/tokenclock"
PGO_SCRIPT = "deploy/pgo.sh"


def instructions(text):
    """(keyword, arguments) per instruction, continuation lines joined."""
    out, cur = [], ""
    for line in text.split("\n"):
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        word, _, rest = cur.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


def stages(instrs):
    result = []
    for word, rest in instrs:
        if word == "FROM":
            result.append([(word, rest)])
        elif result:
            result[-1].append((word, rest))
    return result


def exec_form(rest):
    try:
        value = json.loads(rest)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def problems(dockerfile, dockerignore):
    found = []
    all_stages = stages(instructions(dockerfile))
    if len(all_stages) < 2:
        return ["not multi-stage: %d FROM" % len(all_stages)]
    build, runtime = all_stages[0], all_stages[-1]

    runs = [rest for word, rest in build if word == "RUN"]
    commands = [c.strip() for r in runs for c in r.split("&&")]
    if "bash deploy/pgo.sh" not in commands:
        found.append("build stage: no `bash deploy/pgo.sh` command (got %r)" % commands)
    if not any(re.match(r"strip(\s+--?\S+)*\s+%s$" % re.escape(BINARY), c) for c in commands):
        found.append("build stage: %s is not stripped" % BINARY)

    base = runtime[0][1].split()[0]
    if not re.fullmatch(r"(gcr\.io/distroless/cc-debian12:nonroot|(docker\.io/library/)?debian:bookworm-slim)", base):
        found.append("runtime stage: base %r is neither distroless cc :nonroot nor debian:bookworm-slim" % base)
    copies = [rest for word, rest in runtime if word == "COPY"]
    if not any(c.startswith("--from=") and c.split()[1:2] == ["/src/" + BINARY] for c in copies):
        found.append("runtime stage: %s is not copied from the build stage" % BINARY)
    users = [rest for word, rest in runtime if word == "USER"]
    if not users:
        found.append("runtime stage: no USER (the image would run as the base image's user)")
    elif users[-1] != "65532:65532":
        found.append("runtime stage: last USER is %r, not 65532:65532" % users[-1])

    exposed = {p for word, rest in runtime if word == "EXPOSE" for p in rest.split()}
    for port in ("8080", "9464"):
        if port not in exposed:
            found.append("runtime stage: port %s not exposed" % port)
    entry = [exec_form(rest) for word, rest in runtime if word == "ENTRYPOINT"]
    if entry[-1:] != [["tokenclock"]]:
        found.append('runtime stage: ENTRYPOINT is not ["tokenclock"]')
    cmd = [exec_form(rest) for word, rest in runtime if word == "CMD"]
    if not cmd or cmd[-1] is None or cmd[-1][:1] != ["serve"]:
        found.append("runtime stage: CMD is not an exec-form `serve ...`")
    for word, rest in runtime:
        if word in ("ENV", "ARG") and "TOKENCLOCK_" in rest:
            found.append("runtime stage: %s %s would win over the mounted config" % (word, rest))

    ignored = {l.strip().strip("/") for l in dockerignore.split("\n")}
    if not ignored & {"target", "**/target"}:
        found.append(".dockerignore does not exclude target/")
    if ignored_by(dockerignore, ".cargo/config.toml"):
        found.append(".dockerignore excludes .cargo/config.toml (jemalloc's build options)")
    return found


def pgo_problems(script):
    """What deploy/pgo.sh must do for the image to be the binary measured."""
    found = []
    lines = script.replace("\\\n", " ").split("\n")
    builds = [" ".join(l.split()) for l in lines if re.search(r"\bcargo build\b", l) and not l.strip().startswith("#")]
    if len(builds) != 2:
        found.append("%s: %d cargo builds, not 2 (instrumented, then with the profile)" % (PGO_SCRIPT, len(builds)))
    for b in builds:
        if "cargo build --profile dist --locked" not in b:
            found.append("%s: %r is not `cargo build --profile dist --locked`" % (PGO_SCRIPT, b))
    if builds and not ("-Cprofile-generate=" in builds[0] and "--target-dir target/pgo-generate" in builds[0]):
        found.append("%s: the first build is not instrumented (-Cprofile-generate) in target/pgo-generate" % PGO_SCRIPT)
    if len(builds) > 1 and not ("-Cprofile-use=" in builds[-1] and builds[-1].endswith("--target-dir target/pgo")):
        found.append("%s: the last build does not read the profile (-Cprofile-use) into target/pgo" % PGO_SCRIPT)
    return found


def docker_pattern(pattern):
    """A .dockerignore pattern as a regex over a path in the build context:
    `*` and `?` stop at `/`, `**` crosses any number of directories (none
    too), as Docker's matcher does."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored_by(dockerignore, path):
    """Whether Docker leaves `path` out of the build context: the last
    pattern that matches it or a directory above it decides, and a `!`
    pattern keeps it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for line in dockerignore.split("\n"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        regex = docker_pattern(line.lstrip("!").strip().strip("/"))
        if any(regex.fullmatch(p) for p in prefixes):
            ignored = not keep
    return ignored


def main():
    dockerfile = open(sys.argv[1]).read()
    dockerignore = open(sys.argv[2]).read() if len(sys.argv) > 2 else ""
    found = problems(dockerfile, dockerignore)
    if len(sys.argv) > 3:
        found += pgo_problems(open(sys.argv[3]).read())
    for p in found:
        print("%s: %s" % (sys.argv[1], p))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
