from eventedpleg.cli import main

main()
