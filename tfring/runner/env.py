"""Which of the launcher's environment variables reach every rank on every host (mpirun -x NAME each).

Like horovodrun, everything is forwarded except variables that describe the launching shell or host, or
belong to an outer MPI launch; forwarding those would be wrong on another host (or confuse Open MPI)."""
import re

# (pattern, why). Horovod excludes BASH_FUNC_*, OLDPWD and *CUDA_VISIBLE_DEVICES; the rest are the same kind.
DENYLIST = [
    (r"BASH_FUNC_.*", "exported shell functions (bash syntax, not plain values)"),
    (r"(PWD|OLDPWD|SHLVL|_|HOSTNAME|HOST)", "describe the launching shell and host"),
    (r"SSH_.*", "the launching host's ssh session and agent socket"),
    (r"(XDG_RUNTIME_DIR|XDG_SESSION_.*|TMUX|TMUX_PANE|STY|WINDOW)", "per-host login session"),
    (r".*_VISIBLE_DEVICES", "device visibility is per host (Horovod excludes CUDA_VISIBLE_DEVICES too)"),
    (r"(OMPI|PMIX|PRTE|OPAL|PMI|HYDRA)_.*", "an outer MPI launch's state; mpirun passes its own OMPI_MCA_* on"),
]
_DENY = re.compile(r"(?:%s)\Z" % "|".join(p for p, _ in DENYLIST))
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def forwarded(environ):
    """Sorted names of the variables mpirun should export to the ranks."""
    return sorted(k for k in environ if _NAME.match(k) and not _DENY.match(k))


def export_args(environ):
    args = []
    for name in forwarded(environ):
        args += ["-x", name]  # the value comes from mpirun's own environment: no quoting, no size limit per value
    return args
