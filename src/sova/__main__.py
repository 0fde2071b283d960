from sova.console import main

main()
