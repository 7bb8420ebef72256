from specgen.cli import main

raise SystemExit(main())
