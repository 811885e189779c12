#!/usr/bin/env bash
# Installs and starts what the agent's enforcement tests need: libvirtd and
# QEMU (TCG guests; KVM is not usable on these machines), the Debian kernel
# the guests boot, and systemd-analyze for the unit checks. Idempotent: a
# second run only (re)starts the daemons. systemd is not PID 1 here, so the
# daemons are started by hand (docs/PLATFORM.md).
set -euo pipefail

need=()
command -v libvirtd >/dev/null || need+=(libvirt-daemon-system)
command -v virsh >/dev/null || need+=(libvirt-clients)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
ls /boot/vmlinuz-* >/dev/null 2>&1 || need+=(linux-image-amd64)
command -v systemd-analyze >/dev/null || need+=(systemd)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev) # the guests' static init
command -v tc >/dev/null || need+=(iproute2)                   # the network shares' shaping
command -v nbdkit >/dev/null || need+=(nbdkit)                 # a disk server the project did not write
if ((${#need[@]})); then
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# The guest kernel, where libvirt's qemu user can read it.
mkdir -p /var/lib/libvirt/images
kernel=$(ls /boot/vmlinuz-* | sort -V | tail -1)
install -m 0644 "$kernel" /var/lib/libvirt/images/mrm-vmlinuz

# The modules the I/O guests load (virtio disk and network), from that same
# kernel, uncompressed, with load-order listing them dependencies first (the
# guests' init loads them in that order with finit_module).
kver=${kernel#/boot/vmlinuz-}
mods=/var/lib/libvirt/images/mrm-modules
rm -rf "$mods.new"
mkdir -p "$mods.new"
. "$(dirname "$0")/kmods.sh"
collect_modules "$kver" "$mods.new" virtio_pci virtio_blk virtio_net
rm -rf "$mods"
mv "$mods.new" "$mods"

pgrep -x virtlogd >/dev/null || virtlogd -d
pgrep -x libvirtd >/dev/null || libvirtd -d
for _ in $(seq 1 100); do
	[ -S /var/run/libvirt/libvirt-sock ] && break
	sleep 0.1
done
# The first connection probes QEMU's capabilities (~8 s): pay it here.
virsh -c qemu:///system version
