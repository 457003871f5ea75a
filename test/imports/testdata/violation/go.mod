module example.com/violation

go 1.24.0
