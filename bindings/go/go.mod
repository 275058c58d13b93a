module epcomm

go 1.19
