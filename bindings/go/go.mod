module github.com/epcomm/epcomm/bindings/go

go 1.19
