#!/bin/sh
# check.sh: every mutation in this directory makes the conclusion tests it
# names fail. Each NAME.patch is a change to the product or the experiments
# that breaks the mechanism a paper's conclusion rests on, with the tests
# that must catch it on its "Fails:" line; docs/RESULTS.md lists them. Run
# from the repository root on a clean tree (make mutations); each patch is
# applied, its tests run, and the patch taken back out.
set -eu
dir=hadoopvm/sim/experiments/mutations
export GOFLAGS="${GOFLAGS:--tags=libvirt_dlopen}"
status=0
for patch in "$dir"/*.patch; do
	name=$(basename "$patch" .patch)
	tests=$(sed -n 's/^Fails: //p' "$patch")
	git apply "$patch"
	if ! go test -count=1 -run '^$' ./hadoopvm/sim/experiments/ >/dev/null 2>&1; then
		echo "BROKEN  $name: the mutated tree does not build"
		status=1
		git apply -R "$patch"
		continue
	fi
	for t in $tests; do
		if go test -count=1 -timeout 30m -run "^$t\$" ./hadoopvm/sim/experiments/ >/dev/null 2>&1; then
			echo "MISSED  $name: $t passes"
			status=1
		else
			echo "caught  $name: $t fails"
		fi
	done
	git apply -R "$patch"
done
exit $status
