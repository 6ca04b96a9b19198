#!/usr/bin/env bash
# Builds the project's image with a real container engine and trains the README's Keras example in it, end to end,
# on a Debian 12 machine as root with no image registry in reach (issue #48, item 4; docs/containers.md):
#   1. podman, runc, debootstrap, netavark and aardvark-dns from Debian (installed when missing) and a containers.conf
#      drop-in: runc as the runtime, cgroupfs, and the ulimits capped at what the machine allows (podman's default
#      as root is the kernel's maximum, which runc fails to set here: "error setting rlimit type 7");
#   2. the base image: `debootstrap --variant=minbase` bookworm (+ python3, python3-venv, ca-certificates) from
#      Debian's mirror, imported with `podman import`;
#   3. the Dockerfile built on it (--build-arg BASE), pip inside the build reaching PyPI through the host's CA bundle,
#      mounted read-only at /mnt with a pip.conf naming it (a build argument points pip at it: nothing stays in the
#      image); timed, and the image's size;
#   4. the example at np=2 inside one container (--network=none: loopback only);
#   5. a 2-container job: an internal podman network made for this run (no route out, no DNS: names in /etc/hosts),
#      each container one emulated host running sshd (docker/tfring-ssh, with a key pair made for this run and
#      mounted), and `tfringrun -np 2 -H tfring-1:1,tfring-2:1` started in the first;
#   6. the Helm chart rendered and linted offline by Helm's own engine (helm-python-sdk, Helm v4's Go SDK, in a
#      throwaway venv): tests/test_containers.py's Helm tests.
# Containers, network and temporary files go at the end (trap); the images stay (localhost/tfring:check, 2.5 GB, and
# its base): `podman rmi localhost/tfring:check localhost/tfring-base:bookworm`.
#
#   tools/containers_check.sh                          # everything anew: fresh base, cold build (~7 min on 2 cores)
#   TFRING_CONTAINERS_REUSE=1 tools/containers_check.sh  # reuse the base and podman's layer cache (iterating)
#
# Not run by .ci/run (docs/containers.md says why). Heavy steps run under `nice -n 10`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "containers_check: run as root (apt-get, debootstrap, rootful podman)" >&2; exit 1; }
BASE_IMAGE=localhost/tfring-base:bookworm
IMAGE=localhost/tfring:check
MIRROR=http://deb.debian.org/debian
CA_BUNDLE=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
REUSE=${TFRING_CONTAINERS_REUSE:-}
NICE=(nice -n 10)
t_start=$SECONDS

# One run at a time: a second would build the same tags.
exec 9>/run/lock/tfring-containers-check.lock
flock -n 9 || { echo "containers_check: another run holds /run/lock/tfring-containers-check.lock" >&2; exit 1; }

WORK=$(mktemp -d /var/tmp/tfring-containers.XXXXXX)
NET=tfring-check-$$
C1=tfring-check-$$-1
C2=tfring-check-$$-2
cleanup() {
  podman rm -f -t 0 "$C1" "$C2" >/dev/null 2>&1 || true
  podman network rm -f "$NET" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "containers_check: $*"; }
fail() { echo "containers_check: FAILED: $*" >&2; exit 1; }
# The last lines of a step's log when it fails.
run_logged() {  # LOG COMMAND...
  local log=$1; shift
  "$@" > "$log" 2>&1 || { tail -40 "$log" >&2; fail "$* (log above)"; }
}

# ---- 1. the engine ---------------------------------------------------------------------------------------------
t=$SECONDS
pkgs=(podman runc debootstrap netavark aardvark-dns iptables)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]} (Debian)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${NICE[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# A drop-in (podman >= 4.3 reads containers.conf.d), so that the machine's own containers.conf, if any, stays as is.
conf=/etc/containers/containers.conf.d/50-tfring.conf
mkdir -p "$(dirname "$conf")"
cat > "$WORK/containers.conf" <<'CONF'
# Written by tfring's tools/containers_check.sh.
[containers]
# Podman's default as root raises both limits to the kernel's maximum; this machine's hard limits are lower and
# runc then fails to start any container ("error setting rlimit type 7: operation not permitted").
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
# No systemd as PID 1 here.
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
network_backend = "netavark"
CONF
cmp -s "$WORK/containers.conf" "$conf" || cp "$WORK/containers.conf" "$conf"
fmt='podman {{.Version.Version}}, runtime {{.Host.OCIRuntime.Name}} RUNC, storage {{.Store.GraphDriverName}}'
fmt+=', network {{.Host.NetworkBackend}}, cgroups {{.Host.CgroupsVersion}} ({{.Host.CgroupManager}})'
engine=$(podman info --format "$fmt" 2>/dev/null)
engine=${engine/RUNC/$(runc --version | awk 'NR == 1 {print $3}')}
say "engine: $engine (set up in $((SECONDS - t)) s)"

old_image=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
old_base=$(podman image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)

# ---- 2. the base image -----------------------------------------------------------------------------------------
t=$SECONDS
if [ -n "$REUSE" ] && [ -n "$old_base" ]; then
  say "base: $BASE_IMAGE reused (TFRING_CONTAINERS_REUSE)"
else
  rootfs=$WORK/rootfs
  run_logged "$WORK/debootstrap.log" "${NICE[@]}" debootstrap --variant=minbase \
    --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$MIRROR"
  # No package cache, no lists, nothing of this host (debootstrap copies its resolv.conf and hostname).
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs/etc/resolv.conf" \
    "$rootfs/etc/hostname"
  printf 'deb %s bookworm bookworm-updates main\ndeb %s-security bookworm-security main\n' "$MIRROR" "$MIRROR" \
    > "$rootfs/etc/apt/sources.list"
  tar --numeric-owner -C "$rootfs" -c . |
    podman import -q --change 'CMD ["/bin/bash"]' --message "debootstrap --variant=minbase bookworm" - "$BASE_IMAGE" \
    > /dev/null
  rm -rf "$rootfs"
  say "base: $BASE_IMAGE from debootstrap bookworm minbase + python3, python3-venv, ca-certificates in" \
      "$((SECONDS - t)) s, $(( $(podman image inspect --format '{{.Size}}' "$BASE_IMAGE") / 1000000 )) MB"
fi

# ---- 3. the image ----------------------------------------------------------------------------------------------
# The host's CA bundle and a pip.conf naming it, mounted for the RUN steps only. --network=host: the build reaches
# Debian's mirror and PyPI as the host does (nothing else); --pull=never: no registry is asked for the base.
mkdir -m 755 "$WORK/pip"
cp "$CA_BUNDLE" "$WORK/pip/ca.crt"
printf '[global]\ncert = /mnt/ca.crt\ntimeout = 180\n' > "$WORK/pip/pip.conf"
cache=(--no-cache)
[ -z "$REUSE" ] || cache=()
t=$SECONDS
run_logged "$WORK/build.log" "${NICE[@]}" podman build "${cache[@]}" --pull=never --network=host \
  -v "$WORK/pip:/mnt:ro" --build-arg BASE="$BASE_IMAGE" --build-arg PIP_CONFIG_FILE=/mnt/pip.conf \
  -t "$IMAGE" "$ROOT"
build_s=$((SECONDS - t))
new_image=$(podman image inspect --format '{{.Id}}' "$IMAGE")
image_mb=$(( $(podman image inspect --format '{{.Size}}' "$IMAGE") / 1000000 ))
# The images this run replaced (untagged now), so that repeated runs do not pile up 2.5 GB each.
if [ -n "$old_image" ] && [ "$old_image" != "$new_image" ]; then podman rmi "$old_image" >/dev/null 2>&1 || true; fi
new_base=$(podman image inspect --format '{{.Id}}' "$BASE_IMAGE")
if [ -n "$old_base" ] && [ "$old_base" != "$new_base" ]; then podman rmi "$old_base" >/dev/null 2>&1 || true; fi
how="cold, --no-cache"
[ -z "$REUSE" ] || how="layer cache allowed"
say "build: $IMAGE in $build_s s ($how), image $image_mb MB"
# Nothing of the build's mounts stays: no pip.conf, no CA copy (/mnt empty).
leftover=$(podman run --rm --network=none "$IMAGE" \
  sh -c 'ls -A /mnt; ls /etc/pip.conf 2>/dev/null; env | grep "^PIP_CONFIG_FILE=" || true')
[ -z "$leftover" ] || fail "the build left its pip set-up in the image: $leftover"
podman run --rm --network=none "$IMAGE" > "$WORK/check.log" 2>&1 ||
  { cat "$WORK/check.log"; fail "tfringrun --check-build"; }
say "check-build: $(grep -m1 "TensorFlow:" "$WORK/check.log" | xargs)"

# ---- 4. one container, np=2 --------------------------------------------------------------------------------------
example=(python examples/keras_digits.py --target-accuracy 0.95)
t=$SECONDS
run_logged "$WORK/one.log" "${NICE[@]}" podman run --rm --network=none --shm-size=1g "$IMAGE" \
  tfringrun -np 2 "${example[@]}"
one_acc=$(grep -o "validation accuracy .* on 2 ranks" "$WORK/one.log" | tail -1)
[ -n "$one_acc" ] || fail "no accuracy in the one-container run"
one_s=$((SECONDS - t))
say "one container (--network=none), np=2: $one_acc ($one_s s)"

# ---- 5. two containers, one emulated host each -----------------------------------------------------------------
t=$SECONDS
mkdir -m 700 "$WORK/keys"
ssh-keygen -q -t ed25519 -N '' -C "tfring containers_check $$" -f "$WORK/keys/id_rsa"
rm "$WORK/keys/id_rsa.pub"  # tfring-ssh derives authorized_keys from the private key, as from the chart's Secret
chown -R 1000:1000 "$WORK/keys"  # the image's user (no user namespace: uid 1000 inside is uid 1000 here)
printf 'tfring-1 slots=1\ntfring-2 slots=1\n' > "$WORK/hostfile"
# --internal: no NAT, no default route in the containers; --disable-dns: no resolver that forwards elsewhere.
podman network create --internal --disable-dns --label tfring-containers-check "$NET" > /dev/null
subnet=$(podman network inspect --format '{{range .Subnets}}{{.Subnet}}{{end}}' "$NET")
read -r ip1 ip2 < <(python3 -c 'import ipaddress, sys
hosts = ipaddress.ip_network(sys.argv[1]).hosts(); next(hosts)  # the first is the bridge (gateway)
print(next(hosts), next(hosts))' "$subnet")
for i in 1 2; do
  name=C$i; ip=ip$i
  podman run -d --name "${!name}" --hostname "tfring-$i" --network "$NET" --ip "${!ip}" --dns=none \
    --add-host "tfring-1:$ip1" --add-host "tfring-2:$ip2" --shm-size=1g \
    -v "$WORK/keys:/etc/tfring/ssh:ro" -v "$WORK/hostfile:/etc/tfring/hostfile:ro" -e TFRING_SSH_KEYS=/etc/tfring/ssh \
    "$IMAGE" tfring-ssh sshd > /dev/null
done
[ "$(podman network inspect --format '{{.Internal}}' "$NET")" = true ] || fail "network $NET is not internal"
for c in "$C1" "$C2"; do  # no default route (destination 0.0.0.0): only the job's subnet is reachable
  [ -z "$(podman exec "$c" awk 'NR > 1 && $2 == "00000000"' /proc/net/route)" ] || fail "$c has a default route"
done
# shellcheck disable=SC2054  # -H's list is one argument
launch=(podman exec "$C1" tfring-ssh launch /etc/tfring/hostfile tfringrun -np 2 -H tfring-1:1,tfring-2:1)
hosts=$("${launch[@]}" python -c 'import socket; print(socket.gethostname())' 2>&1) || { echo "$hosts"; fail "launch"; }
[ "$(echo "$hosts" | grep "<stdout>:" | sort | tr '\n' ' ')" = "[0]<stdout>:tfring-1 [1]<stdout>:tfring-2 " ] ||
  { echo "$hosts"; fail "the ranks did not run one per container"; }
rx0=$(podman exec "$C2" awk '$1 == "eth0:" {print $2 + $10}' /proc/net/dev)
t_job=$SECONDS
run_logged "$WORK/two.log" "${NICE[@]}" "${launch[@]}" "${example[@]}"
two_s=$((SECONDS - t_job))
two_acc=$(grep -o "validation accuracy .* on 2 ranks" "$WORK/two.log" | tail -1)
[ -n "$two_acc" ] || fail "no accuracy in the two-container run"
eth_mb=$(( ($(podman exec "$C2" awk '$1 == "eth0:" {print $2 + $10}' /proc/net/dev) - rx0) / 1000000 ))
say "two containers on internal network $NET ($subnet, rank 0 on tfring-1 $ip1, rank 1 on tfring-2 $ip2), np=2:" \
    "$two_acc ($two_s s; $eth_mb MB through tfring-2's eth0, its only route $subnet; set-up $((t_job - t)) s)"
podman rm -f -t 0 "$C1" "$C2" > /dev/null
podman network rm -f "$NET" > /dev/null

# ---- 6. the Helm chart, by Helm's own engine ---------------------------------------------------------------------
t=$SECONDS
run_logged "$WORK/helm.log" python3 -m venv "$WORK/helm-venv"
run_logged "$WORK/helm.log" "$WORK/helm-venv/bin/pip" install -q helm-python-sdk pytest pyyaml
helm_sdk=$("$WORK/helm-venv/bin/python" -c 'import helm_python as h
print("Helm SDK", h.helm_sdk_version(), "(helm-python-sdk)")')
(cd "$ROOT" && run_logged "$WORK/helm.log" env TFRING_TEST_REQUIRE_PACKAGES=helm_python \
   "$WORK/helm-venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_containers.py -k helm)
say "helm chart: rendered and linted offline by $helm_sdk:" \
    "$(grep -E "^[0-9]+ passed" "$WORK/helm.log" | tail -1) ($((SECONDS - t)) s)"

echo
echo "containers_check summary"
echo "  engine:          $engine"
echo "  image build:     $build_s s ($how), $image_mb MB ($IMAGE)"
echo "  one container:   $one_acc ($one_s s)"
echo "  two containers:  $two_acc ($two_s s)"
echo "  helm chart:      $helm_sdk render + lint passed"
echo "  total:           $((SECONDS - t_start)) s"
