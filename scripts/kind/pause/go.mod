module streamingjob.local/pause

go 1.24
