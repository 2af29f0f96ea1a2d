from llama_operator.cli import main

raise SystemExit(main())
