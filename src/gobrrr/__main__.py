from gobrrr.cli import main

main()
