from tfring.runner.launch import main

main()
