package ociimage

import (
	"bytes"
	"encoding/pem"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// CABundle is the CA bundle images get at /etc/ssl/certs/ca-certificates.crt:
// the roots of Mozilla's NSS trust store as golang.org/x/crypto/x509roots/
// fallback embeds them, at the version tools/go.mod pins (go.sum checks it),
// as PEM in the module's order. The build host's bundle differed from host
// to host and changed with its packages, and so did the image's digest.
// Roots NSS trusts only for certificates issued before a date are left
// out: a PEM bundle cannot carry that constraint, and Go's verifier (the
// only client in the image) would trust them for everything.
func CABundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}
