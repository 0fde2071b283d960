from sova.cli import main

main()
