from turnstream.gateway.app import main

main()
