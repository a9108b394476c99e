from turnstream.tool_executor.app import main

main()
