from turnstream.http.app import main

main()
