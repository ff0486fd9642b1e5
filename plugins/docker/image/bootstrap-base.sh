#!/usr/bin/env bash
# Make the sandbox image's base without a registry: a minimal Debian
# bookworm root filesystem built by mmdebstrap from Debian's packages, with
# every tool image/Dockerfile wants and the toolchain its PACKAGES name by
# default, imported into the Docker engine as amelia-base:bookworm. The
# image is labelled amelia.base-packages with the packages it was made
# from: the script does nothing when the tag exists with this script's
# list, and makes it again (saying so) when the list differs or the image
# has no such label, so a base made by an older script is never used as
# if it were current. The image it replaces is left to the engine (a
# container may still use it): `docker image prune` removes it once unused.
#
#   image/bootstrap-base.sh            # needs root (or sudo) and mmdebstrap
#   amelia image build --profile P     # then, with docker.base_image: amelia-base:bookworm
#   image/bootstrap-base.sh sshd       # amelia-sshd:bookworm: Amelia's tools
#                                      # (not the toolchain) plus OpenSSH's
#                                      # server, iptables and sudo, a remote
#                                      # machine for the SSH tests
#   image/bootstrap-base.sh base --check   # only say whether the tag is
#                                      # current: exit 0 if so, 1 if not
#
# Machines with a registry do not need this: the Dockerfile's default base,
# debian:bookworm-slim, is pulled.
set -euo pipefail

suite=${AMELIA_BASE_SUITE:-bookworm}
# What image/Dockerfile needs, and what it installs by default
# (image.Toolchain; a test keeps the two lists equal).
core=git,ca-certificates,bash,coreutils,findutils,grep,procps,tini,passwd
toolchain=build-essential,pkg-config,python3,python3-venv,python3-pip,curl,unzip,xz-utils,jq,less,openssh-client,ripgrep,fzf
tag=amelia-base:$suite
check=
if [ "${2:-}" = --check ]; then
	check=1
elif [ $# -gt 1 ]; then
	echo "usage: $0 [base|sshd] [--check]" >&2
	exit 2
fi
case "${1:-base}" in
base) packages=$core,$toolchain ;;
sshd)
	tag=amelia-sshd:$suite
	packages=$core,openssh-server,iptables,sudo
	;;
*)
	echo "usage: $0 [base|sshd] [--check]" >&2
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
if have=$(docker image inspect --format '{{index .Config.Labels "amelia.base-packages"}}' "$tag" 2>/dev/null); then
	if [ "$have" = "$packages" ]; then
		echo "bootstrap-base: $tag is there"
		exit 0
	fi
	again=": making it again"
	[ -z "$check" ] || again=
	echo "bootstrap-base: $tag was made from ${have:-an older package list (no amelia.base-packages label)}, not $packages$again"
elif [ -n "$check" ]; then
	echo "bootstrap-base: there is no $tag"
fi
[ -z "$check" ] || exit 1

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
	--aptopt='Acquire::Retries "3"' --aptopt='APT::Install-Recommends "false"' \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/etc/ssh/ssh_host_*' \
	--format=tar "$suite" "$tmp/rootfs.tar"
$sudo_ chmod a+r "$tmp/rootfs.tar"
docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["bash"]' \
	--change "LABEL amelia.base-packages=$packages" \
	--message "$tag: mmdebstrap --variant=minbase --include=$packages $suite" \
	"$tmp/rootfs.tar" "$tag" >/dev/null
echo "bootstrap-base: imported $tag"
