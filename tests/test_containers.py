"""Containers (Dockerfile, k8s/mpijob.yaml, helm/tfring), checked offline. The image itself is built and run by
tools/containers_check.sh (podman; not part of this suite): here, the Dockerfile installs with the README's
commands; the ssh helper sets keys and sshd up as the manifests expect (`sshd -t` where sshd exists); the MPIJob
and the chart agree with the image (user, port, paths, example); the chart's templates render, with a renderer of
exactly the Go-template subset they use, strictly (a missing value fails), and, where the helm-python-sdk package
is installed, with Helm's own engine (its Go SDK, v4), which must give the same objects and lint the chart clean;
the output parses as YAML, through kubectl's own YAML reader (`kubectl kustomize`, offline) and, where the
kubernetes-validate package is installed, against Kubernetes' schemas."""
import base64
import copy
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT
from helm_template import STUB_KEY, TemplateError, render

CHART = os.path.join(ROOT, "helm", "tfring")
HOME = "/home/tfring"  # the image user's home (Dockerfile: useradd --uid 1000 tfring)


def _merge(base, override):  # Helm's values merge: maps recursively, anything else replaced
    merged = copy.deepcopy(base)
    for k, v in (override or {}).items():
        merged[k] = _merge(merged[k], v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


def render_chart(values=None, release="demo", namespace="ml"):
    """{template file name: rendered text} of helm/tfring, as `helm template demo helm/tfring -n ml`."""
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(CHART, "values.yaml")) as f:
        merged = _merge(yaml.safe_load(f), values)
    root = {"Values": merged, "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
            "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]}}
    out = {}
    for name in sorted(os.listdir(os.path.join(CHART, "templates"))):
        with open(os.path.join(CHART, "templates", name)) as f:
            out[name] = render(f.read(), root)
    return out


def chart_objects(values=None):
    """{kind: object} of the rendered chart (one object per kind)."""
    objects = {}
    for name, text in render_chart(values).items():
        if name.endswith(".yaml"):
            for doc in yaml.safe_load_all(text):
                assert doc and doc["kind"] not in objects, name
                objects[doc["kind"]] = doc
    return objects


def test_renderer_follows_go_templates():
    root = {"Values": {"n": 2, "on": True, "off": "", "m": {"b": 1, "a": [1, 2]}, "s": "x"}}
    assert render("a\n  {{- .Values.s -}}\n  b", root) == "axb"
    assert render("{{ if .Values.off }}y{{ else }}n{{ end }}{{ if .Values.on }}Y{{ end }}", root) == "nY"
    assert render("{{- range $i := until (int .Values.n) }}[{{ $i }}{{ . }}{{ $.Values.s }}]{{- end }}", root) \
        == "[00x][11x]"
    assert render("k:{{- toYaml .Values.m | nindent 2 }}", root) == "k:\n  a:\n  - 1\n  - 2\n  b: 1"
    assert render('{{ .Values.off | default "d" }} {{ .Values.n | quote }} {{ .Values.on }}', root) == 'd "2" true'
    for bad in ("{{ .Values.missing }}", "{{ .Values.s.deeper }}", "{{ range until 2 }}{{ .Values.s }}{{ end }}",
                "{{ include \"x\" . }}", "{{ with .Values.m }}{{ end }}", "{{ if .Values.on }}", "{{ end }}",
                "{{ .Values.m }}", "{{ tpl .Values.s . }}", '{{ required "need it" .Values.off }}', "{{ .Values.s }"):
        with pytest.raises((TemplateError, TypeError)):
            render(bad, root)


# ---- Dockerfile ----------------------------------------------------------------------------------------------------

def dockerfile():
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        lines = [ln for ln in f.read().splitlines() if not ln.lstrip().startswith("#")]
    steps = []
    for line in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            steps.append((word.upper(), " ".join(rest.split())))
    return steps


def readme_commands():
    """The commands (split at &&) of the README's first bash block: set-up, example run, tests."""
    with open(os.path.join(ROOT, "README.md")) as f:
        block = re.search(r"```bash\n(.*?)```", f.read(), re.S).group(1)
    text = re.sub(r"&&\s*\n", "&& ", "\n".join(ln.split("#")[0] for ln in block.splitlines()))
    return [" ".join(c.split()) for ln in text.splitlines() for c in ln.split("&&") if c.strip()]


def test_dockerfile_installs_with_the_readme_commands():
    readme = readme_commands()
    launch = [i for i, c in enumerate(readme) if "tfringrun" in c][0]
    install, run = readme[:launch], readme[launch]
    assert install[0] == "python3 -m venv .venv" and any("pip install '.[test]'" in c for c in install), readme
    runs = [[" ".join(c.split()) for c in args.split("&&")] for word, args in dockerfile() if word == "RUN"]
    matching = [r for r in runs if r[:len(install)] == install]
    assert len(matching) == 1, "no Dockerfile RUN starts with the README's install commands %s" % install
    assert any(c == ".venv/bin/tfringrun --check-build" for c in matching[0])  # the build fails if tfring cannot load
    # The README's example run works in the image as `tfringrun ...` (the venv's bin is on PATH).
    script = shlex.split(run)[-1]
    assert run.startswith(".venv/bin/tfringrun ") and os.path.exists(os.path.join(ROOT, script)), run


def test_dockerfile_image_layout():
    steps = dockerfile()
    words = [w for w, _ in steps]
    args = dict(steps)  # the last of each
    # The base is a build argument (tools/containers_check.sh passes a debootstrap one); its default is Python's.
    assert steps[0][0] == "ARG" and steps[0][1].startswith("BASE=") and steps[1] == ("FROM", "${BASE}")
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", steps[0][1].partition("=")[2])
    assert words.count("FROM") == 1
    apt = next(a for w, a in steps if w == "RUN" and "apt-get install" in a)
    assert {"g++", "openssh-server", "openssh-client"} <= set(apt.split()) and "/etc/ssh/ssh_host_*" in apt
    assert any(a.startswith("useradd --create-home --uid 1000 ") and a.split("&&")[0].split()[-1] == "tfring"
               for w, a in steps if w == "RUN")  # HOME = /home/tfring
    workdir = args["WORKDIR"]
    assert words.index("COPY") > words.index("WORKDIR") and ("COPY", ". .") in steps
    assert ("ENV", "PATH=%s/.venv/bin:$PATH" % workdir) in steps
    assert ("COPY", "docker/tfring-ssh /usr/local/bin/tfring-ssh") in steps
    ssh_config = next(a for w, a in steps if w == "RUN" and "ssh_config.d" in a)
    assert "Port 2222" in ssh_config and "StrictHostKeyChecking no" in ssh_config
    assert args["EXPOSE"] == "2222" and args["USER"] == "1000:1000"
    assert json.loads(args["CMD"]) == ["tfringrun", "--check-build"] and "ENTRYPOINT" not in words


def _ignored(patterns, path):  # Docker's .dockerignore matching, enough for these patterns
    hit = False
    for p in patterns:
        neg, p = p.startswith("!"), p.lstrip("!")
        rx = "^" + re.escape(p).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*") + "(/.*)?$"
        if re.match(rx, path):
            hit = not neg
    return hit


def test_dockerignore_keeps_the_sources_out_the_host_builds():
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        patterns = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    for path in (".git/HEAD", ".venv/bin/python", "build/lib/x.o", "tfring/_tfring.cpython-311-x86_64-linux-gnu.so",
                 "tfring/libtfring_core.so", "tfring/build_info.json", "tfring/__pycache__/a.pyc", "x.egg-info/PKG"):
        assert _ignored(patterns, path), path
    needed = ["setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "tfring/version.py", "tfring/runner/launch.py",
              "examples/keras_digits.py", "docker/tfring-ssh"]
    needed += [os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(os.path.join(ROOT, "tfring", "cc"))
               for f in fs if f.endswith((".cc", ".h"))]
    assert [p for p in needed if _ignored(patterns, p)] == []


# ---- tfring-ssh ------------------------------------------------------------------------------------------------------

def _ssh_env(tmp_path, stubs):
    """An environment whose PATH has stub commands first: {name: shell body}."""
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir(exist_ok=True)
    # tfring-ssh takes the home from the passwd database (as ssh does): a stub getent points it at tmp_path.
    stubs = dict(stubs, getent='echo "u:x:%d:%d::%s:/bin/bash"' % (os.getuid(), os.getgid(), home))
    for name, body in stubs.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body + "\n")
        (bin_dir / name).chmod(0o755)
    home.mkdir(exist_ok=True)
    return dict(os.environ, HOME=str(home), PATH="%s:%s" % (bin_dir, os.environ["PATH"]))


def _keys(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(keys / "id_rsa")], check=True)
    public = (keys / "id_rsa.pub").read_text()
    (keys / "id_rsa.pub").unlink()  # as the chart's Secret: the private key only, group-readable (fsGroup)
    (keys / "id_rsa").chmod(0o640)
    return keys, public


def _has_user(name):
    import pwd
    try:
        return bool(pwd.getpwnam(name))
    except KeyError:
        return False


SCRIPT = os.path.join(ROOT, "docker", "tfring-ssh")
needs_ssh = pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs ssh-keygen (openssh-client)")


@needs_ssh
def test_tfring_ssh_starts_sshd_with_the_job_key(tmp_path):
    keys, public = _keys(tmp_path)
    env = _ssh_env(tmp_path, {"sshd": 'echo "$0 $*" > "$HOME/sshd.args"'})
    env.update(TFRING_SSH_KEYS=str(keys), TFRING_SSH_PORT="2345")
    subprocess.run(["bash", SCRIPT, "sshd"], env=env, check=True, timeout=30)
    state = tmp_path / "home" / ".tfring-ssh"
    assert (tmp_path / "home" / "sshd.args").read_text().split()[1:] == ["-D", "-e", "-f", str(state / "sshd_config")]
    assert (state / "authorized_keys").read_text().split()[:2] == public.split()[:2]
    config = (state / "sshd_config").read_text()
    assert "Port 2345" in config and "PasswordAuthentication no" in config and "SetEnv PATH=" in config
    sshd = shutil.which("sshd", path=os.environ["PATH"] + ":/usr/sbin")
    if sshd and (os.geteuid() != 0 or _has_user("sshd")):  # as sshd reads them (as root it needs its own user)
        subprocess.run([sshd, "-t", "-f", str(state / "sshd_config")], check=True, timeout=30)


@needs_ssh
def test_tfring_ssh_launch_waits_for_every_host(tmp_path):
    keys, _ = _keys(tmp_path)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# workers\nw-0.svc slots=2\n\nw-1.svc slots=2\n")
    # ssh fails twice for w-1, then answers.
    env = _ssh_env(tmp_path, {"ssh": 'echo "$*" >> "$HOME/ssh.log"\n'
                                     '[[ $* == *w-1.svc* ]] && (( $(grep -c w-1 "$HOME/ssh.log") < 3 )) && exit 255\n'
                                     'exit 0',
                              "sleep": "true"})
    env.update(TFRING_SSH_KEYS=str(keys))
    out = subprocess.run(["bash", SCRIPT, "launch", str(hostfile), "echo", "started", "a b"], env=env, timeout=30,
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    assert out == "started a b\n"
    log = (tmp_path / "home" / "ssh.log").read_text().splitlines()
    assert [ln.split()[-2] for ln in log] == ["w-0.svc"] + ["w-1.svc"] * 3 and "-p 2222" in log[0]
    assert (tmp_path / "home" / ".ssh" / "id_rsa").stat().st_mode & 0o777 == 0o600
    env.update(TFRING_SSH_WAIT_SECONDS="0")
    (tmp_path / "home" / "ssh.log").write_text("")
    fail = subprocess.run(["bash", SCRIPT, "wait", str(hostfile)], env=env, timeout=30, stderr=subprocess.PIPE,
                          text=True)
    assert fail.returncode == 1 and "w-1.svc:2222 did not accept ssh within 0 s" in fail.stderr


# ---- Kubeflow MPIJob -----------------------------------------------------------------------------------------------

def test_mpijob_runs_the_example_on_the_image():
    with open(os.path.join(ROOT, "k8s", "mpijob.yaml")) as f:
        job = yaml.safe_load(f)
    assert job["apiVersion"] == "kubeflow.org/v2beta1" and job["kind"] == "MPIJob"
    spec = job["spec"]
    assert spec["sshAuthMountPath"] == HOME + "/.ssh" and spec["mpiImplementation"] == "OpenMPI"
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    worker = spec["mpiReplicaSpecs"]["Worker"]
    assert launcher["replicas"] == 1
    for replica in (launcher, worker):
        pod = replica["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == 1000  # the image's user, whose home has .ssh mounted
        assert all(isinstance(a, str) for a in pod["containers"][0]["command"])
    cmd = launcher["template"]["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["tfring-ssh", "launch", "/etc/mpi/hostfile"] and cmd[3] == "tfringrun"
    assert int(cmd[cmd.index("-np") + 1]) == worker["replicas"] * spec["slotsPerWorker"]
    assert cmd[cmd.index("--hostfile") + 1] == "/etc/mpi/hostfile"
    assert cmd[-2:] == ["python", "examples/keras_digits.py"] and os.path.exists(os.path.join(ROOT, cmd[-1]))
    container = worker["template"]["spec"]["containers"][0]
    assert container["command"] == ["tfring-ssh", "sshd"]  # default port 2222 = the image's ssh_config
    assert container["readinessProbe"]["tcpSocket"]["port"] == 2222 == container["ports"][0]["containerPort"]
    assert container["resources"]["requests"]["cpu"]


# ---- Helm chart ----------------------------------------------------------------------------------------------------

OWN_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"


def test_chart_metadata_and_values_cover_the_templates():
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(ROOT, "tfring", "version.py")) as f:
        version = re.search(r'__version__ = "(.*)"', f.read()).group(1)
    assert chart["apiVersion"] == "v2" and chart["name"] == "tfring" and chart["appVersion"] == version
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    # Every .Values path in any branch (rendering covers only the branches taken) is declared in values.yaml.
    for name in os.listdir(os.path.join(CHART, "templates")):
        with open(os.path.join(CHART, "templates", name)) as f:
            for path in re.findall(r"\.Values((?:\.\w+)+)", f.read()):
                node = values
                for key in path.strip(".").split("."):
                    assert isinstance(node, dict) and key in node, "%s: .Values%s not in values.yaml" % (name, path)
                    node = node[key]


def test_chart_renders_the_job_objects():
    objs = chart_objects()
    assert set(objs) == {"Service", "ConfigMap", "Secret", "StatefulSet", "Job"}
    svc, sts, job = objs["Service"], objs["StatefulSet"], objs["Job"]
    assert svc["metadata"]["name"] == sts["spec"]["serviceName"] == "demo-worker"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    for selector in (svc["spec"]["selector"], sts["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= pod_labels.items()
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["podManagementPolicy"] == "Parallel"
    hosts = objs["ConfigMap"]["data"]["hostfile"].splitlines()
    assert hosts == ["demo-worker-%d.demo-worker.ml.svc slots=1" % i for i in range(2)]
    assert base64.b64decode(objs["Secret"]["data"]["id_rsa"]).decode() == STUB_KEY
    worker = sts["spec"]["template"]["spec"]["containers"][0]
    launcher = job["spec"]["template"]["spec"]["containers"][0]
    assert worker["image"] == launcher["image"] == "tfring:latest"
    assert worker["command"] == ["tfring-ssh", "sshd"] and worker["ports"][0]["containerPort"] == 2222
    assert launcher["command"] == ["tfring-ssh", "launch", "/etc/tfring/config/hostfile", "tfringrun", "--hostfile",
                                   "/etc/tfring/config/hostfile", "--ssh-port", "2222", "python",
                                   "examples/keras_digits.py"]
    for kind, container in (("StatefulSet", worker), ("Job", launcher)):
        pod = objs[kind]["spec"]["template"]["spec"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TFRING_SSH_KEYS"] == "/etc/tfring/ssh" and env["TFRING_SSH_PORT"] == "2222"
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert set(mounts.values()) <= set(volumes) and mounts["/etc/tfring/ssh"] == "ssh-key"
        assert volumes["ssh-key"]["secret"] == {"secretName": "demo-ssh", "defaultMode": 0o440}
        assert pod["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}
        assert container["resources"]["requests"]["cpu"]
    assert {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}["config"]["configMap"]["name"] \
        == objs["ConfigMap"]["metadata"]["name"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    notes = render_chart()["NOTES.txt"]
    assert "kubectl logs -n ml -f job/demo-launcher" in notes and "never been installed" in notes


OVERRIDES = {"workers": {"replicas": 3, "slots": 2}, "ssh": {"port": 2022, "privateKey": OWN_KEY},
             "image": {"repository": "registry.example/tfring", "tag": "0.1.0"},
             "launcher": {"command": ["python", "train.py", "--epochs", "3"],
                          "tfringrunArgs": ["--cycle-time-ms", "4"]},
             "env": [{"name": "TFRING_FUSION_THRESHOLD", "value": "16777216"}], "nodeSelector": {"pool": "cpu"}}


def test_chart_values_reach_the_objects():
    objs = chart_objects(OVERRIDES)
    assert objs["ConfigMap"]["data"]["hostfile"].splitlines()[2] == "demo-worker-2.demo-worker.ml.svc slots=2"
    assert base64.b64decode(objs["Secret"]["data"]["id_rsa"]).decode() == OWN_KEY
    launcher = objs["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert launcher["command"][3:] == ["tfringrun", "--hostfile", "/etc/tfring/config/hostfile", "--ssh-port", "2022",
                                       "--cycle-time-ms", "4", "python", "train.py", "--epochs", "3"]
    assert launcher["image"] == "registry.example/tfring:0.1.0"
    for kind in ("Job", "StatefulSet"):
        pod = objs[kind]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"pool": "cpu"}
        assert {"name": "TFRING_FUSION_THRESHOLD", "value": "16777216"} in pod["containers"][0]["env"]
    assert objs["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["tcpSocket"] == \
        {"port": "ssh"}
    with pytest.raises(TemplateError, match="image.repository is required"):
        render_chart({"image": {"repository": ""}})


@pytest.mark.parametrize("values", [None, OVERRIDES], ids=["defaults", "overrides"])
def test_chart_renders_the_same_with_helm(values):
    """Helm's own engine (helm-python-sdk: Helm v4's Go SDK behind a C ABI, no cluster, no helm binary) renders
    the chart to the same objects and text as the renderer above, but for genPrivateKey's key, random in Helm."""
    helm = pytest.importorskip("helm_python")
    with helm.Chart.load(CHART) as chart:
        theirs = chart.render(values, name="demo", namespace="ml", is_install=True)
    ours = render_chart(values)
    assert sorted(theirs) == sorted("tfring/templates/" + name for name in ours)
    for name, text in ours.items():
        got = theirs["tfring/templates/" + name]
        if not name.endswith(".yaml"):
            assert got.strip() == text.strip(), name  # NOTES.txt
            continue
        mine, helms = list(yaml.safe_load_all(text)), list(yaml.safe_load_all(got))
        if name == "secret.yaml" and values is None:
            key = base64.b64decode(helms[0]["data"]["id_rsa"]).decode()
            assert key.startswith("-----BEGIN EC PRIVATE KEY-----\n") and key != STUB_KEY, key
            helms[0]["data"]["id_rsa"] = mine[0]["data"]["id_rsa"]
        assert helms == mine, name


def test_chart_lints_clean_with_helm():
    helm = pytest.importorskip("helm_python")
    for values in (None, OVERRIDES):
        report = helm.lint(CHART, values, strict=True, namespace="ml")
        assert report["errors"] == [], report
        # Only advice (severity 1: info) is left, e.g. "icon is recommended"; no warning, no error.
        assert [m for m in report["messages"] if m["severity"] > 1] == [], report
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError, match="image.repository is required"):
        chart.render({"image": {"repository": ""}}, name="demo", namespace="ml")


def _rendered_files(tmp_path):
    files = []
    for name, text in render_chart().items():
        if name.endswith(".yaml"):
            (tmp_path / name).write_text(text)
            files.append(name)
    shutil.copy(os.path.join(ROOT, "k8s", "mpijob.yaml"), str(tmp_path / "mpijob.yaml"))
    return files + ["mpijob.yaml"]


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl not installed")
def test_manifests_parse_with_kubectl(tmp_path):
    """`kubectl kustomize` reads the files with Kubernetes' own YAML code, offline (apply/create --dry-run=client
    need an API server for the resource mapping)."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": _rendered_files(tmp_path)}))
    out = subprocess.run(["kubectl", "kustomize", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=60, env=dict(os.environ, KUBECONFIG=os.devnull))
    assert out.returncode == 0, out.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out.stdout))
    assert kinds == ["ConfigMap", "Job", "MPIJob", "Secret", "Service", "StatefulSet"]


def test_manifests_match_kubernetes_schemas(tmp_path):
    """Every object (the MPIJob's pod templates as PodTemplates) against Kubernetes' OpenAPI schemas, strictly
    (unknown fields fail). kubernetes-validate ships the schemas: no network."""
    kv = pytest.importorskip("kubernetes_validate")
    for name in _rendered_files(tmp_path):
        for doc in yaml.safe_load_all((tmp_path / name).read_text()):
            if doc["kind"] == "MPIJob":
                for role, spec in doc["spec"]["mpiReplicaSpecs"].items():
                    kv.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()},
                                 "template": spec["template"]}, "1.32", strict=True)
            else:
                kv.validate(doc, "1.32", strict=True)
