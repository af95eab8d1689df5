#!/bin/bash
# PID 1 of the VM test's systemd boot (scripts/vm-test.sh), started by the initramfs with the root
# image on / and the job share on /mnt/vm: readies the image's copy of the host's /etc for a boot
# under QEMU TCG, then becomes the real systemd (PID 1 stays PID 1 across the exec). systemd boots
# to vm-test.target (systemd.unit= on the kernel command line), which runs vm-check.service:
# check.sh, the checks of packaging/sandlot.service; the unit powers the guest off when it ends.
set -u
share=/mnt/vm
units=/etc/systemd/system
# The host's fstab names the host's disks, which the guest does not have: local-fs.target would wait
# for them and fall into emergency mode. The root is already mounted (rw) by the initramfs.
: >/etc/fstab
cp "$share/systemd/vm-test.target" "$share/systemd/vm-check.service" "$units/"
# Masked: units of the host's /etc or of basic.target that need a network, a console login or a
# first-boot update, or that only rebuild caches (ldconfig, hwdb, catalog), which take tens of
# seconds under TCG and which nothing here uses. Masking a unit that is not installed is harmless.
for u in systemd-timesyncd.service systemd-pstore.service getty@tty1.service serial-getty@ttyS0.service \
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer man-db.timer \
    ldconfig.service systemd-hwdb-update.service systemd-journal-catalog-update.service \
    systemd-update-done.service systemd-firstboot.service keyboard-setup.service console-setup.service \
    postgresql.service e2scrub_reap.service systemd-networkd.service systemd-resolved.service \
    networking.service; do
    ln -sf /dev/null "$units/$u"
done
exec /lib/systemd/systemd
