module github.com/cidrshift/cidrshift/tools

go 1.26.8

require golang.org/x/tools v0.41.0
