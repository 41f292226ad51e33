from kernelfix.cli import main

raise SystemExit(main())
