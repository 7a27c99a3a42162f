from samelang.cli import main

main()
