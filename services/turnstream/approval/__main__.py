from turnstream.approval.app import main

main()
