from llama_bench.cli import main

raise SystemExit(main())
