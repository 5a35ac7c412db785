"""The development bed: real components started by our own scripts, for `make run`, `make demo`,
the image build and the tests alike: Kafka brokers (single and replicated, several versions),
the Schema Registry, MinIO, a kube-apiserver with etcd, and the kind bed. Imports nothing of
`tests`."""
