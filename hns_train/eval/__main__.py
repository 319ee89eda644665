"""`python -m hns_train.eval`: see `hns_train.eval.cli` for the commands."""

from hns_train.eval.cli import main

raise SystemExit(main())
