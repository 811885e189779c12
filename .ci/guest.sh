#!/usr/bin/env bash
# Builds mrmarket's worker guest (hadoopvm/worker) into a directory
# (default bin/guest; `make guest`, and the real-guest tests through
# hadoopvm/workertest):
#
#   vmlinuz     the distribution's kernel (Debian's linux-image-amd64)
#   initrd.img  an initramfs: /init, the worker as a static Go binary
#               (CGO_ENABLED=0), and that kernel's virtio modules (disk,
#               network, the virtio-serial control channel)
#   mrm-guest   the tool that packs it, which also writes the workers'
#               input images (mrm-guest data)
#
# Downloads nothing but Debian's kernel package when it is missing (as
# root); the rest is the Go toolchain. Idempotent: a file changes only when
# what it is built from did (the archive is deterministic).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/guest}

if ! ls /boot/vmlinuz-* >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		echo "guest: no kernel in /boot: apt-get install linux-image-amd64 (as root)" >&2
		exit 1
	fi
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends linux-image-amd64
fi
kernel=$(ls /boot/vmlinuz-* | sort -V | tail -1)
kver=${kernel#/boot/vmlinuz-}
if [ ! -r "$kernel" ]; then
	echo "guest: $kernel is not readable (Debian makes it root's): run as root, or chmod 0644 it" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out" "$tmp/modules"
. .ci/kmods.sh
collect_modules "$kver" "$tmp/modules" virtio_pci virtio_blk virtio_net virtio_console

CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/init" ./hadoopvm/worker/cmd/mrm-init
CGO_ENABLED=0 go build -trimpath -o "$tmp/mrm-guest" ./hadoopvm/worker/cmd/mrm-guest
"$tmp/mrm-guest" initramfs -init "$tmp/init" -modules "$tmp/modules" -o "$tmp/initrd.img"

# Replace a file only when it changed: a running guest keeps reading its own.
update() { cmp -s "$1" "$2" || install -m "$3" "$1" "$2"; }
update "$kernel" "$out/vmlinuz" 0644
update "$tmp/initrd.img" "$out/initrd.img" 0644
update "$tmp/mrm-guest" "$out/mrm-guest" 0755
echo "guest: $out (kernel $kver, initramfs $(($(stat -c %s "$out/initrd.img") >> 10)) KiB)"
