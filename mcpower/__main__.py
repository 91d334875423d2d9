from mcpower.cli import main

main()
