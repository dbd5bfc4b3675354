#!/usr/bin/env bash
# The GPU bundle's runner (scripts/gpu/run, `run` in the bundle) on the CPU (ctest: gpu_bundle_runner):
#   bash test/bundle_test.sh BUILD_DIR PYTHON
# Makes the bundle from BUILD_DIR (scripts/gpu-bundle), copies it to another folder and removes
# the first, checks that its binaries have no RUNPATH, then runs `run selftest` from the copy:
# with a clean environment (no LD_LIBRARY_PATH: the runner finds torch through PYTHON) and, where
# mount namespaces are allowed, with the source and build trees hidden (an empty tmpfs over
# them) and this system's copies of the bundled libraries too (/dev/null over them). It also
# checks where every library loads from, that ptune_tests reads PTUNE_SOURCE_DIR from the
# environment, that the tests phase refuses to run without a GPU, and that the profile phase
# packs a trace. About 1 minute on 2 cores.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
python=${2:-}
fail() { echo "bundle_test: FAILED: $*" >&2; exit 1; }
[ -n "$python" ] || fail "PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): the runner finds torch through it"

tmp=$(mktemp -d /tmp/ptune-bundle-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS

bash "$src/scripts/gpu-bundle" --no-build --build "$build" "$tmp/made"
cp -a "$tmp/made" "$tmp/bundle"
rm -rf "$tmp/made"
bundle=$tmp/bundle
for b in "$bundle"/bin/*; do
  if readelf -d "$b" | grep -E '\((RPATH|RUNPATH)\)'; then fail "$b keeps a RUNPATH"; fi
done
if grep -rlF "$build" "$bundle/run" "$bundle/lib" "$bundle/configs" >/dev/null; then fail "the bundle names the build folder"; fi

# A clean environment: nothing on the library path, the venv's python named only by PYTHON.
clean=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" TMPDIR=/tmp PYTHON="$python")
# Hidden from the runner, where mount namespaces are allowed: the source tree and the build tree
# (an empty tmpfs over each; not the venv: the runner takes torch from it, as it takes the GPU
# machine's), and this system's copies of the libraries the bundle carries (/dev/null bound
# over each), so that those load from the bundle's lib/ or not at all.
hide=() hide_files=()
case "$python" in "$src"/*) ;; *) hide+=("$src") ;; esac
case "$build" in "$src"/*) ;; *) case "$python" in "$build"/*) ;; *) hide+=("$build") ;; esac ;; esac
while read -r name path; do
  [ -e "$bundle/lib/$name" ] && hide_files+=("$(readlink -f "$path")")
done < <(ldd "$build/apps/ptune/ptune" "$build/test/ptune_tests" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
mkdir "$tmp/probe"
if ! unshare -m mount -t tmpfs -o size=1m tmpfs "$tmp/probe" 2>/dev/null; then
  hide=() hide_files=()
  echo "bundle_test: note: cannot hide the source and build trees here (no mount namespace); the PTUNE_SOURCE_DIR check below still shows the overrides are read"
else
  echo "bundle_test: hidden from the runner: ${hide[*]} (empty tmpfs); ${hide_files[*]} (/dev/null)"
fi
run_bundle() {  # run_bundle OUTDIR [VAR=VALUE...] -- ARGS...: bash BUNDLE/run ARGS, with the above hidden
  local out=$1; shift
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  if [ $((${#hide[@]} + ${#hide_files[@]})) -eq 0 ]; then
    "${clean[@]}" PTUNE_RESULTS_DIR="$out" "${vars[@]}" bash "$bundle/run" "$@"
    return
  fi
  "${clean[@]}" PTUNE_RESULTS_DIR="$out" "${vars[@]}" unshare -m bash -c '
    set -e; n=$1; shift
    for ((i = 0; i < n; i++)); do mount -t tmpfs -o size=1m tmpfs "$1"; shift; done
    n=$1; shift
    for ((i = 0; i < n; i++)); do mount --bind /dev/null "$1"; shift; done
    exec "$@"' _ ${#hide[@]} "${hide[@]}" ${#hide_files[@]} "${hide_files[@]}" bash "$bundle/run" "$@"
}
cd "$tmp"
# With --time-limit (each step stopped in time); the other phases below run without a limit.
run_bundle "$tmp/out" -- --time-limit 600 selftest || fail "run selftest (see above)"
sweep=$tmp/out/selftest-sweep.json
"$python" - "$sweep" <<'EOF' || fail "the selftest sweep's JSON"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert r["status"] == "complete" and len(rows) == 3 and all(x["status"] == "ok" for x in rows), r["status"]
print("bundle_test: sweep rows: " + ", ".join("%s %.1f samples/s" % (x["name"], x.get("samples_per_s", 0)) for x in rows))
EOF
grep -q '^All tests passed' "$tmp/out/selftest.txt" || fail "ptune_tests in the selftest"
grep -q 'binaries.*RUNPATH: none' "$tmp/out/versions.txt" || fail "versions.txt does not say RUNPATH none"

# Where the runner's environment loads every library from: the bundle's lib/, torch's
# site-packages (torch/lib, nvidia/*/lib), or the base system a GPU machine's python3 brings.
site=$("$python" -c 'import importlib.util as u, os; print(os.path.dirname(os.path.dirname(u.find_spec("torch").origin)))')
# One command in the runner's environment (each run starts by asking the python for torch): ldd,
# and ptune_tests with PTUNE_SOURCE_DIR pointed elsewhere (its exit status in neg.rc).
run_bundle "$tmp/out-exec" -- exec bash -c '
  ldd "$1/bin/ptune" "$1/bin/ptune_tests" >"$2/ldd.txt" 2>&1 || exit 1
  PTUNE_SOURCE_DIR="$2/nowhere" ptune_tests "the schema and the parser agree" >"$2/neg.txt" 2>&1
  echo $? >"$2/neg.rc"' _ "$bundle" "$tmp" || { cat "$tmp/ldd.txt"; fail "ldd in the runner's environment"; }
! grep -q 'not found' "$tmp/ldd.txt" || { cat "$tmp/ldd.txt"; fail "libraries not found"; }
system_libs=" $(sed -n 's/^system_libs=//p' "$bundle/BUILD-INFO") linux-vdso.so.1 "
while read -r name path; do
  real=$(readlink -f "$path")
  case "$real" in "$bundle"/lib/*|"$site"/*) continue ;; esac
  [[ $system_libs == *" $name "* ]] || fail "$name loads from $real: neither the bundle nor torch nor the base system (BUILD-INFO's system_libs)"
done < <(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' "$tmp/ldd.txt" | sort -u)
echo "bundle_test: every library loads from the bundle ($(ls "$bundle/lib" | tr '\n' ' ')), torch's site-packages or the base system"

# ptune_tests reads PTUNE_SOURCE_DIR from the environment: pointed elsewhere, the schema test fails.
if [ "$(cat "$tmp/neg.rc")" = 0 ]; then
  cat "$tmp/neg.txt"; fail "the schema test passed with PTUNE_SOURCE_DIR pointing nowhere"
fi
grep -qE "parse_error|$tmp/nowhere" "$tmp/neg.txt" || { cat "$tmp/neg.txt"; fail "the schema test failed otherwise than by reading nothing"; }

# Honest on a machine without a GPU: the GPU phases refuse (exit 3) unless told PTUNE_BUNDLE_CPU=1.
r=0; run_bundle "$tmp/out-nogpu" -- tests >"$tmp/nogpu.txt" 2>&1 || r=$?
[ "$r" -eq 3 ] || { cat "$tmp/nogpu.txt"; fail "run tests without a GPU: exit $r, not 3"; }

# Options are checked before anything runs: a time limit that is no number is a usage error.
r=0; run_bundle "$tmp/out-usage" -- --time-limit soon versions >"$tmp/usage.txt" 2>&1 || r=$?
[ "$r" -eq 2 ] && grep -q -- '--time-limit soon' "$tmp/usage.txt" ||
  { cat "$tmp/usage.txt"; fail "run --time-limit soon: exit $r, not 2 with the value named"; }

# The profile phase's plumbing on the CPU: a one-row config, its trace gzipped into the results folder.
"$python" - "$bundle/configs/quickstart-cpu.json" "$tmp/one-row.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.pop("sweep", None)
c["measure"].update(warmup_steps=1, steps=2, repeats=1, profile_steps=1)
c["data"].update(num_samples=32, image_size=32)
json.dump(c, open(sys.argv[2], "w"))
EOF
run_bundle "$tmp/out-profile" PTUNE_BUNDLE_CPU=1 -- profile "$tmp/one-row.json" >"$tmp/profile.log" 2>&1 ||
  { cat "$tmp/profile.log"; fail "run profile"; }
ls "$tmp/out-profile"/trace-*.json.gz >/dev/null 2>&1 || { cat "$tmp/profile.log"; fail "no trace in the results folder"; }
gzip -dc "$tmp/out-profile"/trace-*.json.gz | "$python" -c 'import json, sys; json.load(sys.stdin)' ||
  fail "the gzipped trace is not JSON"
echo "bundle_test: profile phase: $(cd "$tmp/out-profile" && ls | tr '\n' ' ')"
echo "bundle_test: passed in $((SECONDS - t0))s"
