"""Two processes for real: `jax.distributed` over the loopback interface, CPU collectives by Gloo.

Issue 28, item 2. ``docs/multi_process.md`` holds a script (``fit_sharded.py``: a sharded HPF
CAVI fit and an SBMF Gibbs run over ``sharding.nnz_mesh()``) and its launch lines; this test reads
both from that file, so the page and the test cannot drift, and runs the one-machine lines: two
processes, each with two CPU host devices, one mesh of four devices, 2001 nonzeros (blocks of 501,
the last one padded). The lines run as written with three substitutions: the interpreter
(``.venv/bin/python`` -> this one), a free port in place of 12355, and the folder (a temporary one
holding the script, where process 0 writes ``fit_sharded.npz``). `test_launch_lines_are_the_readmes`
checks that the two-host lines of docs/scaling.md are the page's, and that the one-machine lines are those
with the loopback address and the CPU-demo variables.

What is checked. Process 0 placed blocks 0 and 1, process 1 blocks 2 and 3 (each process only
its own devices' blocks); both print the full result's shapes and the same fingerprint (digest of
the bytes) of HPF's gamma_shape and SBMF's U draws, equal to that of process 0's file, so process 1
gathered the full arrays too; the file equals the single-process results within the bounds below.

Tolerances (u = 2^-53 = 1.1e-16; a reordered sum of n terms moves by at most (n - 1) u sum |x_i|;
N = 2001 entries, HPF K = 5 and 20 sweeps, SBMF K = 3 and 10 sweeps of 2 (K + 1) = 8 draws):

- Against one process with the same four blocks (`hpf.fit` / `sbmf.sample` with
  ``nnz_mesh(4)`` here): the per-block sums are the same computation; only the psum of the D = 4
  partial sums may add in another order (Gloo's all-reduce across processes against XLA's within
  one), 3 u relative per positive sum. HPF: 20 sweeps x 3 u = 6.7e-15, checked at rtol 1e-13.
  SBMF: 10 x 8 x 3 u = 2.7e-14 x magnitude, checked at rtol = atol = 1e-12. Measured: 0 (bit for
  bit, JAX 0.10.2, this machine).
- Against the unsharded run (no mesh): every sum is reordered, N u = 2.2e-13 relative per sweep
  for HPF's positive sums; 20 sweeps give 4.4e-12, checked at rtol 1e-11 (measured 5.0e-14).
  SBMF: 10 x 8 x N u = 1.8e-11 x magnitude, checked at rtol = atol = 1e-10 (the tolerance of
  test_sharding's 10-sweep chain; measured 2.1e-11 relative on a draw of size 4e-5, i.e. 7.8e-16
  absolute, and 2.9e-16 relative on the log joint). A real fault (a block on the wrong process or
  twice, a missing cross-process sum) moves values by O(1).

Skipped where the platform cannot run it: no Gloo in jaxlib (`make_gloo_tcp_collectives`), Windows,
or no loopback TCP. The run takes 66 s on this 2-core machine (127 s with the machine loaded at 9):
two processes that each compile both solvers, and the two references computed here meanwhile; so it
runs under ``-m slow``. The launch-line check runs always (0.01 s).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "multi_process.md"
README = ROOT / "docs" / "scaling.md"  # the sharding guide (moved from the README)
TIMEOUT_S = 300  # both processes together; a fault that hangs a collective is killed here
LINE = re.compile(r"process (\d) of (\d): (\d) of (\d) devices, blocks \[([\d, ]*)\] of (\d) placed here; "
                  r"HPF ELBO (\S+), gamma_shape \(([\d, ]+)\) ([0-9a-f]{12}); SBMF U \(([\d, ]+)\) ([0-9a-f]{12})")


def _block(name: str) -> str:
    """The fenced block right after the ``<!-- name -->`` marker in docs/multi_process.md."""
    text = DOC.read_text()
    m = re.search(r"<!-- " + re.escape(name) + r" -->\n```\w*\n(.*?)\n```", text, re.S)
    assert m, f"{DOC} has no fenced block after <!-- {name} -->"
    return m.group(1)


def _launch_lines(name: str) -> list[str]:
    """The command lines of a launch block (comments and ``wait`` left out)."""
    return [ln.strip() for ln in _block(name).splitlines()
            if ln.strip() and not ln.lstrip().startswith("#") and ln.strip() != "wait"]


def _parse(line: str) -> tuple[dict[str, str], list[str]]:
    """``A=1 B=2 prog args [&]`` -> ({A: 1, B: 2}, [prog, args])."""
    words = shlex.split(line)
    if words and words[-1] == "&":
        words = words[:-1]
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cannot_run() -> str | None:
    """Why this platform cannot run two JAX processes with CPU collectives, or None."""
    if sys.platform == "win32":
        return "JAX's CPU collectives (Gloo over TCP) are not built for Windows"
    from jaxlib import _jax

    if not hasattr(_jax, "make_gloo_tcp_collectives"):
        return "this jaxlib has no Gloo CPU collectives (jaxlib._jax.make_gloo_tcp_collectives)"
    try:
        _free_port()
    except OSError as exc:
        return f"no TCP on the loopback interface: {exc!r}"
    return None


def test_launch_lines_are_the_readmes():
    """The sharding guide's launch lines are this page's two-host lines, verbatim; the one-machine lines
    (the ones the test runs) are those with the coordinator at 127.0.0.1 and the two CPU-demo
    variables, the first one sent to the background."""
    hosts, local = _launch_lines("launch: two hosts"), _launch_lines("launch: one machine")
    readme = [ln.strip() for ln in README.read_text().splitlines() if ln.strip().startswith("FACTORBAYES_COORDINATOR=")]
    assert len(readme) == 2, f"docs/scaling.md has {len(readme)} launch lines, expected the two hosts'"
    for ln in readme:
        assert ln in hosts, f"docs/scaling.md launch line not in {DOC.name}'s two-host lines: {ln}"
    assert len(hosts) == len(local) == 2
    assert local[0].endswith(" &") and not local[1].endswith("&")
    for i, (h, ln) in enumerate(zip(hosts, local)):
        (h_env, h_cmd), (l_env, l_cmd) = _parse(h), _parse(ln)
        assert l_cmd == h_cmd == [".venv/bin/python", "fit_sharded.py"]
        assert h_env["FACTORBAYES_PROCESS_ID"] == l_env["FACTORBAYES_PROCESS_ID"] == str(i)
        assert l_env.pop("JAX_PLATFORMS") == "cpu"
        assert l_env.pop("XLA_FLAGS") == "--xla_force_host_platform_device_count=2"
        port = h_env.pop("FACTORBAYES_COORDINATOR").rsplit(":", 1)[1]
        assert l_env.pop("FACTORBAYES_COORDINATOR") == f"127.0.0.1:{port}"
        assert l_env == h_env  # the number of processes and the process id


def _start_pair(lines: list[str], cwd: Path) -> list[tuple[subprocess.Popen, Path, Path]]:
    """Start the launch lines as written, with this interpreter and a free port in place of the
    doc's; stdout / stderr of process i go to ``cwd/stdout.i`` / ``cwd/stderr.i``."""
    port = str(_free_port())
    started = []
    for i, line in enumerate(lines):
        env_vars, cmd = _parse(line)
        assert cmd[0] == ".venv/bin/python", line
        env_vars["FACTORBAYES_COORDINATOR"] = env_vars["FACTORBAYES_COORDINATOR"].rsplit(":", 1)[0] + ":" + port
        env = dict(os.environ, **env_vars,
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        out, err = cwd / f"stdout.{i}", cwd / f"stderr.{i}"
        with open(out, "w") as fo, open(err, "w") as fe:
            started.append((subprocess.Popen([sys.executable, *cmd[1:]], cwd=cwd, env=env, stdout=fo, stderr=fe),
                            out, err))
    return started


def _kill(started) -> list[int]:
    """Kill (and reap) the processes of `_start_pair` still running; return their pids."""
    killed = []
    for p, _, _ in started:
        if p.poll() is None:
            p.kill()
            p.wait()
            killed.append(p.pid)
    return killed


def _wait_pair(started, t0: float) -> list[tuple[int, str, str]]:
    """Wait for both processes and return (returncode, stdout, stderr) per process. On a timeout
    (``TIMEOUT_S`` from ``t0``), or when one process fails and the other is not done 60 s later
    (a collective waiting for a dead partner), kill them; fail with both processes' output."""
    first_failure = None
    while any(p.poll() is None for p, _, _ in started):
        now = time.monotonic()
        if first_failure is None and any(p.poll() not in (None, 0) for p, _, _ in started):
            first_failure = now
        if now - t0 > TIMEOUT_S or (first_failure is not None and now - first_failure > 60):
            break
        time.sleep(0.2)
    killed = _kill(started)
    results = [(p.returncode, out.read_text(), err.read_text()) for p, out, err in started]
    report = "\n".join(f"--- process {i}: returncode {rc}{' (killed)' if p.pid in killed else ''}\nstdout:\n"
                       f"{so[-2000:]}\nstderr:\n{se[-4000:]}"
                       for i, ((p, _, _), (rc, so, se)) in enumerate(zip(started, results)))
    if killed:
        pytest.fail(f"killed after {time.monotonic() - t0:.0f} s (timeout {TIMEOUT_S} s, or 60 s after the "
                    f"other process failed):\n{report}")
    assert all(rc == 0 for rc, _, _ in results), f"a process failed:\n{report}"
    return results


def _load_script(path: Path):
    spec = importlib.util.spec_from_file_location("fit_sharded_doc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # definitions only: main() runs under __main__
    return module


def _results(fit, draws) -> dict[str, np.ndarray]:
    """The arrays the script saves, from a fit and a sample made here."""
    return {"hpf_elbo": np.asarray(fit.trace), **{f"hpf_{k}": np.asarray(v) for k, v in fit.state._asdict().items()},
            **{f"sbmf_{k}": v.values for k, v in draws.posterior.items()}, "sbmf_lp": draws.sample_stats["lp"].values}


def _assert_close(got, ref, what, hpf_rtol, sbmf_tol):
    assert set(got) == set(ref), (sorted(got), sorted(ref))
    for name in sorted(ref):
        assert got[name].shape == ref[name].shape, (name, got[name].shape, ref[name].shape)
        if name.startswith("hpf_"):
            np.testing.assert_allclose(got[name], ref[name], rtol=hpf_rtol, err_msg=f"{name} vs {what}")
        else:
            np.testing.assert_allclose(got[name], ref[name], rtol=sbmf_tol, atol=sbmf_tol, err_msg=f"{name} vs {what}")


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
    reason = _cannot_run()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "fit_sharded.py"
    script.write_text(_block("script: fit_sharded.py") + "\n")
    t0 = time.monotonic()
    started = _start_pair(_launch_lines("launch: one machine"), tmp_path)
    try:
        # the single-process references, computed here while the two processes run (this process
        # has four CPU devices: tests/conftest.py)
        from custom_inference import hpf, sbmf, sharding
        from ppl_models.hpf import HPFHyper
        from ppl_models.sbmf import SBMFHyper

        mod = _load_script(script)
        counts, ratings = mod.make_data()

        def run(mesh):
            fit = hpf.fit(0, counts, 5, HPFHyper(), max_iter=20, tol=0, n_draws=0, progress=False, mesh=mesh)
            draws = sbmf.sample(1, ratings, 3, SBMFHyper(), num_chains=2, num_warmup=5, num_samples=5, block=10,
                                progress=False, mesh=mesh)
            return _results(fit, draws)

        same_blocks, no_mesh = run(sharding.nnz_mesh(4)), run(None)
    except BaseException:
        _kill(started)
        raise
    results = _wait_pair(started, t0)

    lines = []
    for i, (_, out, _) in enumerate(results):
        found = [LINE.search(ln) for ln in out.splitlines() if LINE.search(ln)]
        assert len(found) == 1, f"process {i} printed no summary line:\n{out[-2000:]}"
        lines.append(found[0].groups())
    for i, (pid, n_proc, local, total, blocks, n_blocks, *_rest) in enumerate(lines):
        assert (int(pid), int(n_proc), int(local), int(total), int(n_blocks)) == (i, 2, 2, 4, 4)
        # each process placed only its own devices' blocks
        assert [int(b) for b in blocks.split(",")] == [2 * i, 2 * i + 1]
    # both processes hold the same full arrays: same ELBO, shapes, bytes
    assert lines[0][6:] == lines[1][6:], lines

    with np.load(tmp_path / "fit_sharded.npz") as f:
        got = {k: f[k] for k in f.files}
    _, _, _, _, _, _, elbo, g_shape, g_fp, u_shape, u_fp = lines[1]
    assert float(elbo) == got["hpf_elbo"][-1]
    assert (g_shape, g_fp) == ("200, 5", mod.fingerprint(got["hpf_gamma_shape"]))
    assert (u_shape, u_fp) == ("2, 5, 200, 3", mod.fingerprint(got["sbmf_U"]))

    # the same four blocks in one process: only the psum's order may differ (module docstring)
    _assert_close(got, same_blocks, "one process, 4 devices", hpf_rtol=1e-13, sbmf_tol=1e-12)
    # no mesh: every sum reordered (module docstring)
    _assert_close(got, no_mesh, "one process, no mesh", hpf_rtol=1e-11, sbmf_tol=1e-10)


_SWITCHED_OFF = """
import jax
jax.config.update("jax_cpu_collectives_implementation", None)  # no CPU collectives: no cross-process psum
from custom_inference import sharding
sharding.initialize_distributed()
print(jax.config.jax_cpu_collectives_implementation)
jax.distributed.shutdown()
"""


def test_initialize_distributed_turns_cpu_collectives_back_on():
    """With ``jax_cpu_collectives_implementation`` None, the first cross-process computation on CPU
    fails ("Multiprocess computations aren't implemented on the CPU backend", measured with two
    processes); `initialize_distributed` sets it back to Gloo before the backend starts (one
    process here: the setting, not the collectives, is what is checked)."""
    env = dict(os.environ, FACTORBAYES_COORDINATOR=f"127.0.0.1:{_free_port()}", FACTORBAYES_NUM_PROCESSES="1",
               FACTORBAYES_PROCESS_ID="0", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, "-c", _SWITCHED_OFF], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "gloo", proc.stdout
