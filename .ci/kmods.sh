# Sourced by .ci/libvirt.sh and .ci/guest.sh: copies kernel modules, with
# their dependencies, uncompressed, for a guest's init to load.
#
#   collect_modules KVER DIR MODULE...
#
# writes DIR/<module>.ko for each module and its dependencies (modules
# built into the kernel are left out) and DIR/load-order listing them
# dependencies first, the order the guests' init loads them in with
# finit_module; DIR/kernel-release is KVER.
collect_modules() {
	local kver=$1 dir=$2
	shift 2
	local -A seen=()
	local order=()
	addmod() {
		local m=$1 dep deps f
		[[ -n ${seen[$m]:-} ]] && return
		seen[$m]=1
		deps=$(modinfo -k "$kver" -F depends "$m")
		for dep in ${deps//,/ }; do addmod "$dep"; done
		f=$(modinfo -k "$kver" -n "$m")
		case $f in
		/*.ko) install -m 0644 "$f" "$dir/$m.ko" ;;
		/*.ko.xz) xz -dc "$f" >"$dir/$m.ko" ;;
		/*.ko.zst) zstd -qdc "$f" >"$dir/$m.ko" ;;
		/*.ko.gz) gzip -dc "$f" >"$dir/$m.ko" ;;
		*) return ;; # built in
		esac
		chmod 0644 "$dir/$m.ko"
		order+=("$m")
	}
	local m
	for m in "$@"; do addmod "$m"; done
	printf '%s\n' "${order[@]}" >"$dir/load-order"
	echo "$kver" >"$dir/kernel-release"
}
