"""One module per model (per seed system): its small check problems, cross-check and SBC adapters, bridge blocks and errata rows, declared as the model's `SPEC` for `validation.checks.registry`."""
