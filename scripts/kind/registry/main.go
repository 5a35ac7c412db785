// Command registry is the CNCF Distribution registry with the filesystem storage driver only
// (the bed's config.yml): upstream's main links the Azure, GCS and S3 drivers and their SDKs.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// Execute reports its own errors and exits non-zero on them.
	_ = registry.RootCmd.Execute()
}
