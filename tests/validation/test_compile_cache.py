"""validation.frontdoor.compile_cache: where the CLI keeps compiled programs, and that it can be switched off."""

from pathlib import Path

from validation.frontdoor import compile_cache


def test_cache_dir_follows_the_environment(tmp_path):
    assert compile_cache.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "factorbayes" / "jax"
    assert compile_cache.cache_dir({"FACTORBAYES_JAX_CACHE": str(tmp_path / "c")}) == tmp_path / "c"
    for off in ("off", "0", "none", "OFF", ""):
        assert compile_cache.cache_dir({"FACTORBAYES_JAX_CACHE": off}) is None
    assert compile_cache.cache_dir({}) == Path("~/.cache").expanduser() / "factorbayes" / "jax"


def test_a_configured_cache_is_kept():
    # the test suite configures one (tests/conftest.py): enable() must not move it elsewhere
    import jax

    before = jax.config.jax_compilation_cache_dir
    got = compile_cache.enable({"FACTORBAYES_JAX_CACHE": "/nonexistent/should-not-be-used"})
    assert jax.config.jax_compilation_cache_dir == before
    assert got is not None and str(got) != "/nonexistent/should-not-be-used"
