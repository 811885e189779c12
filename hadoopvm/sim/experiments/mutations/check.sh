#!/bin/sh
# check.sh: every mutation in this directory makes the conclusion tests it
# names fail. Each NAME.patch is a change to the product or the experiments
# that breaks the mechanism a paper's conclusion rests on, with the tests
# that must catch it on its "Fails:" line; docs/RESULTS.md lists them. Run
# from the repository root on a clean tree (make mutations); each patch is
# applied, its tests run, and the patch taken back out; a patch the code
# has moved away from is reported stale, to be rewritten. A caught
# mutation prints the test's last line, so a failure for another reason
# (a run's error rather than a check) shows; each test's output is kept
# in $MUTATIONS_LOG (a temporary directory by default).
# With arguments, only the mutations named (check.sh NAME...).
set -eu
dir=hadoopvm/sim/experiments/mutations
log=${MUTATIONS_LOG:-$(mktemp -d)}
mkdir -p "$log"
export GOFLAGS="${GOFLAGS:--tags=libvirt_dlopen}"
status=0
patches=$(for name in "$@"; do echo "$dir/$name.patch"; done)
for patch in ${patches:-"$dir"/*.patch}; do
	name=$(basename "$patch" .patch)
	tests=$(sed -n 's/^Fails: //p' "$patch")
	if ! git apply "$patch" 2>"$log/$name.apply"; then
		echo "STALE   $name: the patch no longer applies ($log/$name.apply)"
		status=1
		continue
	fi
	trap 'git apply -R "$patch"' EXIT
	trap 'exit 130' INT TERM
	if ! go test -count=1 -run '^$' ./hadoopvm/sim/experiments/ >"$log/$name.build" 2>&1; then
		echo "BROKEN  $name: the mutated tree does not build ($log/$name.build)"
		status=1
	else
		for t in $tests; do
			out="$log/$name.$t"
			if go test -count=1 -timeout 30m -run "^$t\$" ./hadoopvm/sim/experiments/ >"$out" 2>&1; then
				echo "MISSED  $name: $t passes"
				status=1
			elif grep -q -e '^panic:' -e 'test timed out' "$out"; then
				echo "BROKEN  $name: $t panics or times out ($out)"
				status=1
			else
				# The test's last line: a seed's failed check (none: it
				# failed before it checked anything).
				last=$(grep -E '_test\.go:[0-9]+: ' "$out" | tail -n 1 | sed 's/^ *//' | cut -c1-200)
				if [ -z "$last" ]; then
					echo "BROKEN  $name: $t fails before any check ($out)"
					status=1
				else
					echo "caught  $name: $t fails: $last"
				fi
			fi
		done
	fi
	git apply -R "$patch"
	trap - EXIT INT TERM
done
echo "test output in $log"
exit $status
