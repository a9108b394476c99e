from turnstream.audit.app import main

main()
