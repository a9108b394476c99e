from turnstream.turn_runner.app import main

main()
