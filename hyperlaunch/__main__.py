from hyperlaunch.cli import main

main()
