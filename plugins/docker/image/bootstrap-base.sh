#!/usr/bin/env bash
# Make the sandbox image's base without a registry: a minimal Debian
# bookworm root filesystem built by mmdebstrap from Debian's packages, with
# every tool image/Dockerfile wants, imported into the Docker engine as
# amelia-base:bookworm. Does nothing when that tag already exists.
#
#   image/bootstrap-base.sh            # needs root (or sudo) and mmdebstrap
#   amelia image build --profile P     # then, with docker.base_image: amelia-base:bookworm
#   image/bootstrap-base.sh sshd       # amelia-sshd:bookworm: the same plus
#                                      # OpenSSH's server, iptables and sudo,
#                                      # a remote machine for the SSH tests
#
# Machines with a registry do not need this: the Dockerfile's default base,
# debian:bookworm-slim, is pulled.
set -euo pipefail

suite=${AMELIA_BASE_SUITE:-bookworm}
packages=git,ca-certificates,bash,coreutils,findutils,grep,procps,tini,passwd
tag=amelia-base:$suite
case "${1:-base}" in
base) ;;
sshd)
	tag=amelia-sshd:$suite
	packages=$packages,openssh-server,iptables,sudo
	;;
*)
	echo "usage: $0 [base|sshd]" >&2
	exit 2
	;;
esac

if ! command -v docker >/dev/null; then
	echo "bootstrap-base: no docker command: install Docker (the engine and its CLI) first" >&2
	exit 1
fi
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
	echo "bootstrap-base: the Docker engine does not answer (docker version failed): is Docker running?" >&2
	exit 1
fi
if docker image inspect "$tag" >/dev/null 2>&1; then
	echo "bootstrap-base: $tag is there"
	exit 0
fi

sudo_=""
[ "$(id -u)" -eq 0 ] || sudo_=sudo
if ! command -v mmdebstrap >/dev/null; then
	echo "bootstrap-base: installing mmdebstrap"
	$sudo_ apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq mmdebstrap >/dev/null
fi

tmp=$(mktemp -d)
trap '$sudo_ rm -rf "$tmp"' EXIT
echo "bootstrap-base: building a $suite root filesystem with mmdebstrap ($packages)"
$sudo_ mmdebstrap --quiet --variant=minbase --include="$packages" \
	--aptopt='Acquire::Retries "3"' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/etc/ssh/ssh_host_*' \
	--format=tar "$suite" "$tmp/rootfs.tar"
$sudo_ chmod a+r "$tmp/rootfs.tar"
docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["bash"]' \
	--message "$tag: mmdebstrap --variant=minbase --include=$packages $suite" \
	"$tmp/rootfs.tar" "$tag" >/dev/null
echo "bootstrap-base: imported $tag"
