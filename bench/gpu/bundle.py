"""``make gpu-bundle``: everything an offline GPU machine lacks for the GPU check, in one folder.

Commands::

    make gpu-bundle                         # writes gpu-bundle/ at the repo root
    python -m bench.gpu.bundle --out /tmp/b # the same, elsewhere
    bash gpu-bundle/run.sh OUT              # on the GPU machine (PYTHON=python3 by default)

The GPU machine has Python (3.12 there), torch, numba, numpy, lightning, psutil,
pytest, pyyaml, tqdm and pillow, but no ffcv, no compiler we can count on, no apt
and no package index. The bundle holds:

* ``wheels/ffcv-1.0.2-cp310-abi3-linux_x86_64.whl``: upstream FFCV's Python files
  with its C++ extension built here against the *stable* ABI
  (``-DPy_LIMITED_API=0x030A0000``, so one build imports on CPython 3.10 and
  later; its only Python call is ``PyModule_Create2``), and beside it, in
  ``ffcv.libs/``, the OpenCV and libjpeg-turbo libraries it links, with their own
  dependencies, taken from Debian's package files (``apt-get download``,
  unpacked with ``dpkg-deb -x`` into a private folder, never into ``/``). The
  extension finds them through its ``DT_RPATH`` (``$ORIGIN/../ffcv.libs``), which
  also serves the libraries' own dependencies; the C and C++ runtimes are the
  machine's. Nothing is compiled on the GPU machine.
* ``wheels/ffcv_pairs-*.whl``: this project; and the pure-Python wheels it needs
  that the machine lacks (jsonargparse and its two helpers).
* ``project/``: the tests and ``bench/`` (the checks run from there).
* ``fallback/``: Debian 12's ``libstdc++.so.6`` and ``libgcc_s.so.1``, preloaded by the
  runner only where the machine's C++ runtime predates GCC 12 (OpenCV needs
  ``GLIBCXX_3.4.30``). The libraries need glibc 2.34 or later.
* ``run.sh``: the runner (``bench/gpu/run.sh``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

__all__ = ["LIMIT_MIB", "build", "main", "shared_deps"]

REPO = Path(__file__).resolve().parents[2]
FFCV = "1.0.2"
#: What the bundle may weigh: the device tool carries a working tree of 64 MiB.
LIMIT_MIB = 60
#: Debian packages of the libraries ffcv's extension links; their dependencies follow.
ROOT_PACKAGES = ("libopencv-core406", "libopencv-imgproc406", "libturbojpeg0")
#: Libraries every Linux with Python has, in versions at least Debian 12's: never shipped.
SYSTEM = re.compile(r"^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so")
#: The C++ runtime the libraries were built with (GLIBCXX_3.4.30, GCC 12): preloaded by run.sh
#: only where the machine's own libstdc++ is older.
FALLBACK = {"libstdc++6": "libstdc++.so.6", "libgcc-s1": "libgcc_s.so.1"}
#: Pure-Python wheels the GPU machine lacks (jsonargparse for the project's CLI).
PURE = ("jsonargparse", "docstring_parser", "typeshed_client")
#: What of the repository travels in project/.
PROJECT = ("tests", "bench", "configs", "pyproject.toml")
SKIP = shutil.ignore_patterns("__pycache__", "results", ".venv-*", ".work", "*.pyc")


def _run(cmd: list[str], **kw: object) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{proc.stderr[-3000:]}")
    return str(proc.stdout)


def shared_deps(path: Path, prefix: Path) -> dict[str, str]:
    """``ldd`` of ``path`` with every library folder under ``prefix`` searched first:
    soname -> where it resolves."""
    dirs = sorted({str(p.parent) for p in prefix.rglob("*.so*")})
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(dirs)}
    out = {}
    for line in _run(["ldd", str(path)], env=env).splitlines():
        m = re.match(r"\s*(\S+) => (\S+|not found)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _owner(path: str) -> str:
    """The Debian package that installed ``path`` (``/lib`` is ``/usr/lib`` on Debian 12)."""
    tries = [path, os.path.realpath(path)]
    tries += ["/usr" + path] if path.startswith("/lib") else []
    for candidate in tries:
        proc = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout.split(":")[0]
    raise RuntimeError(f"no Debian package owns {path}")


def _fetch_debs(names: list[str], debs: Path, prefix: Path) -> None:
    fresh = [n for n in names if not list(debs.glob(f"{n}_*.deb"))]
    if fresh:
        _run(["apt-get", "download", *fresh], cwd=debs)
    for name in names:
        (deb,) = debs.glob(f"{name}_*.deb")
        _run(["dpkg-deb", "-x", str(deb), str(prefix)])


def _ffcv_source(work: Path) -> Path:
    sdist = work / f"ffcv-{FFCV}.tar.gz"
    if not sdist.exists():
        _run([sys.executable, "-m", "pip", "download", f"ffcv=={FFCV}", "--no-deps",
              "--no-binary", ":all:", "--no-build-isolation", "-q", "-d", str(work)])  # fmt: skip
    shutil.unpack_archive(sdist, work)
    return work / f"ffcv-{FFCV}"


def _build_extension(src: Path, libs: Path, out: Path) -> None:
    """``_libffcv.abi3.so``: stable ABI, OpenCV and turbojpeg from ``libs``."""
    cflags = _run(["pkg-config", "--cflags", "opencv4", "libturbojpeg"]).split()
    links = [f"-l:{name}" for name in ("libopencv_core.so.406", "libopencv_imgproc.so.406",
                                       "libturbojpeg.so.0")]  # fmt: skip
    _run(["g++", "-O3", "-shared", "-fPIC", "-std=c++17", "-DPy_LIMITED_API=0x030A0000",
          f"-I{sysconfig.get_paths()['include']}", *cflags, str(src / "libffcv" / "libffcv.cpp"),
          "-o", str(out), f"-L{libs}", *links, "-lpthread",
          "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../ffcv.libs"])  # fmt: skip


def _native_libs(ext: Path, work: Path) -> tuple[Path, list[str]]:
    """Unpack the Debian packages the extension needs, following ``ldd`` until every
    library but the system's resolves into the private prefix."""
    debs, prefix = work / "debs", work / "prefix"
    shutil.rmtree(prefix, ignore_errors=True)
    debs.mkdir(exist_ok=True)
    libdir = prefix / "usr" / "lib" / "x86_64-linux-gnu"
    packages = list(ROOT_PACKAGES)
    _fetch_debs(packages, debs, prefix)
    _build_extension(work / f"ffcv-{FFCV}", libdir, ext)
    while True:
        outside = {
            soname: where
            for soname, where in shared_deps(ext, prefix).items()
            if not SYSTEM.match(soname) and not where.startswith(str(prefix))
        }
        if not outside:
            return prefix, packages
        missing = [s for s, where in outside.items() if where == "not found"]
        if missing:
            raise RuntimeError(f"{ext.name}: no library found for {missing}")
        owners = {_owner(where) for where in outside.values()}
        new = sorted(owners - set(packages))
        if not new:
            raise RuntimeError(f"cannot bring {sorted(outside)} into the bundle")
        packages += new
        _fetch_debs(new, debs, prefix)


def _record_line(root: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root).as_posix()},sha256={digest},{len(data)}"


def _ffcv_wheel(src: Path, ext: Path, prefix: Path, wheels: Path, work: Path) -> Path:
    root = work / "wheel"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(src / "ffcv", root / "ffcv", ignore=SKIP)
    shutil.copy2(ext, root / "ffcv" / "_libffcv.abi3.so")
    (root / "ffcv.libs").mkdir()
    for soname, where in shared_deps(ext, prefix).items():
        if not SYSTEM.match(soname):
            shutil.copy2(Path(where).resolve(), root / "ffcv.libs" / soname)
    info = root / f"ffcv-{FFCV}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: ffcv\nVersion: {FFCV}\n"
        "Summary: FFCV, its extension built for the stable ABI by ffcv-pairs' gpu-bundle\n"
    )
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: ffcv-pairs gpu_bundle\nRoot-Is-Purelib: false\n"
        "Tag: cp310-abi3-linux_x86_64\n"
    )
    files = sorted(p for p in root.rglob("*") if p.is_file())
    record = [_record_line(root, p) for p in files] + [f"ffcv-{FFCV}.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    wheel = wheels / f"ffcv-{FFCV}-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(root).as_posix())
    return wheel


def _size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def build(out: Path, work: Path) -> list[str]:
    """Write the bundle to ``out`` (replacing it); returns the lines of its summary."""
    shutil.rmtree(out, ignore_errors=True)
    wheels = out / "wheels"
    wheels.mkdir(parents=True)
    src = _ffcv_source(work)
    ext = work / "_libffcv.abi3.so"
    prefix, packages = _native_libs(ext, work)
    _ffcv_wheel(src, ext, prefix, wheels, work)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(wheels), str(REPO)])  # fmt: skip
    pins = [f"{name}=={metadata.version(name)}" for name in PURE]
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
          "-d", str(wheels), *pins])  # fmt: skip
    for name in PROJECT:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, out / "project" / name, ignore=SKIP)
        else:
            shutil.copy2(path, out / "project" / name)
    shutil.copy2(Path(__file__).with_name("run.sh"), out / "run.sh")
    runtime = work / "runtime"
    shutil.rmtree(runtime, ignore_errors=True)
    _fetch_debs(list(FALLBACK), work / "debs", runtime)
    (out / "fallback").mkdir()
    for soname in FALLBACK.values():
        (found,) = {p.resolve() for p in runtime.rglob(soname)}
        shutil.copy2(found, out / "fallback" / soname)
    size = _size_mib(out)
    if size > LIMIT_MIB:
        raise RuntimeError(f"{out}: {size:.1f} MiB, over the {LIMIT_MIB} MiB limit")
    return [
        f"gpu-bundle: {out} ({size:.1f} MiB; limit {LIMIT_MIB})",
        f"  Debian packages: {' '.join(sorted(packages))}",
        f"  wheels: {' '.join(sorted(p.name for p in wheels.iterdir()))}",
        f"  run there: bash {out.name}/run.sh OUT",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu.bundle", description=__doc__)
    p.add_argument("--out", type=Path, default=REPO / "gpu-bundle", help="the bundle folder")
    p.add_argument("--work", type=Path, default=None, help="downloads and build (kept)")
    args = p.parse_args(argv)
    if shutil.which("apt-get") is None or shutil.which("g++") is None:
        print("gpu-bundle: needs apt-get and g++ (run `make install` first)", file=sys.stderr)
        return 2
    work = args.work or REPO / "bench" / ".work" / "gpu-bundle"
    work.mkdir(parents=True, exist_ok=True)
    try:
        lines = build(args.out.resolve(), work.resolve())
    except RuntimeError as e:
        print(f"gpu-bundle: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
