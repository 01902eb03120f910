// Package release signs, attests, publishes and verifies a gofit release
// (make release; tools/release.sh) in the formats cosign reads, with
// sigstore's own Go modules doing the cryptography:
//
//   - keys: cosign's key files (cosign generate-key-pair writes the same
//     ENCRYPTED SIGSTORE PRIVATE KEY PEM, cosign.pub a PKIX public key);
//   - files: a signature over sha256sums as cosign sign-blob writes it
//     (base64 of the signature over the file), so `cosign verify-blob
//     --key` checks it;
//   - attestations: in-toto v1 statements (in-toto/attestation's types) in
//     DSSE envelopes (application/vnd.in-toto+json), one per line in a
//     .intoto.jsonl file: SLSA provenance v1 whose subjects are every
//     artifact's digest, and each platform's CycloneDX SBOM;
//   - registries: the image index and the chart (an OCI artifact in Helm's
//     media types) pushed by digest, each signed with a simple-signing
//     payload under the cosign tag sha256-HEX.sig, attestations under
//     sha256-HEX.att, so `cosign verify --key` and `cosign
//     verify-attestation --key` find them.
//
// Keyless signing (Fulcio certificates, Rekor entries) needs the network;
// this package signs with a key only, and verification never needs the
// network.
package release

import (
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// PasswordEnv holds the private key's password, as for cosign.
const PasswordEnv = "COSIGN_PASSWORD"

// GenerateKey returns a new ECDSA P-256 key pair as cosign writes it: the
// private key encrypted with password (scrypt + secretbox, sigstore's
// format), the public key as PKIX PEM.
func GenerateKey(password []byte) (priv, pub []byte, err error) {
	if password == nil {
		password = []byte{}
	}
	return cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc(password))
}

// LoadSigner parses a private key PEM (cosign's encrypted format, or an
// unencrypted PKCS#8, EC or PKCS#1 key); password opens an encrypted one.
func LoadSigner(privPEM, password []byte) (signature.SignerVerifier, error) {
	if password == nil {
		password = []byte{}
	}
	key, err := cryptoutils.UnmarshalPEMToPrivateKey(privPEM, cryptoutils.StaticPasswordFunc(password))
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	return signature.LoadDefaultSignerVerifier(key)
}

// LoadSignerFile is LoadSigner on a file, the password from $COSIGN_PASSWORD.
func LoadSignerFile(path string) (signature.SignerVerifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := LoadSigner(b, []byte(os.Getenv(PasswordEnv)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// LoadVerifier parses a public key PEM (cosign.pub).
func LoadVerifier(pubPEM []byte) (signature.Verifier, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pubPEM)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	return signature.LoadDefaultVerifier(pub)
}

// LoadVerifierFile is LoadVerifier on a file.
func LoadVerifierFile(path string) (signature.Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := LoadVerifier(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// PublicKeyPEM is the signer's public key as cosign.pub holds it.
func PublicKeyPEM(s signature.Signer) ([]byte, error) {
	pub, err := s.PublicKey()
	if err != nil {
		return nil, err
	}
	return cryptoutils.MarshalPublicKeyToPEM(pub)
}

// ErrVerify marks every failed verification: a bad signature, a digest
// that does not match, a missing signature or attestation.
var ErrVerify = errors.New("verification failed")

// Fingerprint is a public key PEM's fingerprint as the README and
// docs/install.md print the project's: "sha256:" and the hex SHA-256 of
// the key's DER SubjectPublicKeyInfo, what
// `openssl pkey -pubin -in cosign.pub -outform DER | sha256sum` prints.
func Fingerprint(pubPEM []byte) (string, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pubPEM)
	if err != nil {
		return "", fmt.Errorf("public key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("public key: %w", err)
	}
	h := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(h[:]), nil
}

// ErrNotAnchor: the signing key is not the one the repository publishes
// (cosign.pub at its root), so users who verify against that key, as
// docs/install.md says, would reject the release.
var ErrNotAnchor = errors.New("the signing key is not the trust anchor")

// CheckAnchor returns ErrNotAnchor unless s's public key is the key in
// anchorPEM.
func CheckAnchor(s signature.Signer, anchorPEM []byte) error {
	want, err := Fingerprint(anchorPEM)
	if err != nil {
		return fmt.Errorf("anchor: %w", err)
	}
	pub, err := PublicKeyPEM(s)
	if err != nil {
		return err
	}
	got, err := Fingerprint(pub)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: it is %s, the anchor %s", ErrNotAnchor, got, want)
	}
	return nil
}
