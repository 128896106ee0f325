"""``python -m factorbayes``: the command line (`validation.frontdoor.cli`)."""

from validation.frontdoor.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
