package release

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	provenance "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The predicate types cosign verify-attestation --type names
// (slsaprovenance1, cyclonedx) and the DSSE payload type of a statement.
const (
	ProvenanceType   = "https://slsa.dev/provenance/v1"
	CycloneDXType    = "https://cyclonedx.org/bom"
	InTotoPayload    = "application/vnd.in-toto+json"
	BuildType        = "https://github.com/gofit-dev/gofit/tools/release.sh@v1"
	DefaultBuilderID = "https://github.com/gofit-dev/gofit/tools/release.sh"
)

// Subject is one artifact an attestation speaks for: a file by name, or
// an image or chart by its reference, and its SHA-256 (hex).
type Subject struct {
	Name   string
	SHA256 string
}

// Build is what the provenance records of how the artifacts were made.
type Build struct {
	Version  string    // the release, vX.Y.Z
	Commit   string    // the source commit (40 hex)
	Source   string    // the repository, https://github.com/gofit-dev/gofit
	Registry string    // where it was published ("" for none)
	Builder  string    // builder id (DefaultBuilderID when empty)
	Epoch    time.Time // SOURCE_DATE_EPOCH: every artifact's time
	Started  time.Time // when the build ran
	Finished time.Time
	// Toolchain is the Go version that compiled the binaries.
	Toolchain string
}

// ProvenanceStatement is an in-toto v1 statement of SLSA provenance v1
// for the subjects, as JSON.
func ProvenanceStatement(subjects []Subject, b Build) ([]byte, error) {
	if b.Version == "" || b.Commit == "" || b.Source == "" {
		return nil, fmt.Errorf("provenance: version, commit and source are required")
	}
	ext, err := structpb.NewStruct(map[string]any{
		"version":  b.Version,
		"source":   b.Source,
		"registry": b.Registry,
	})
	if err != nil {
		return nil, err
	}
	internal, err := structpb.NewStruct(map[string]any{
		"SOURCE_DATE_EPOCH": fmt.Sprint(b.Epoch.Unix()),
		"toolchain":         b.Toolchain,
	})
	if err != nil {
		return nil, err
	}
	builder := b.Builder
	if builder == "" {
		builder = DefaultBuilderID
	}
	md := &provenance.BuildMetadata{InvocationId: fmt.Sprintf("%s@%s", b.Version, b.Commit)}
	if !b.Started.IsZero() {
		md.StartedOn = timestamppb.New(b.Started)
	}
	if !b.Finished.IsZero() {
		md.FinishedOn = timestamppb.New(b.Finished)
	}
	p := &provenance.Provenance{
		BuildDefinition: &provenance.BuildDefinition{
			BuildType:          BuildType,
			ExternalParameters: ext,
			InternalParameters: internal,
			ResolvedDependencies: []*intoto.ResourceDescriptor{{
				Uri:    "git+" + b.Source + "@refs/tags/" + b.Version,
				Digest: map[string]string{"gitCommit": b.Commit},
			}},
		},
		RunDetails: &provenance.RunDetails{Builder: &provenance.Builder{Id: builder}, Metadata: md},
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("provenance: %w", err)
	}
	return statement(subjects, ProvenanceType, p)
}

// SBOMStatement is an in-toto v1 statement of a CycloneDX SBOM (the JSON
// given) about one subject, as cosign attest --type cyclonedx makes it.
func SBOMStatement(subject Subject, sbom []byte) ([]byte, error) {
	var pred structpb.Struct
	if err := protojson.Unmarshal(sbom, &pred); err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	return statement([]Subject{subject}, CycloneDXType, &pred)
}

func statement(subjects []Subject, predicateType string, pred proto.Message) ([]byte, error) {
	var ps *structpb.Struct
	if st, ok := pred.(*structpb.Struct); ok {
		ps = st
	} else {
		raw, err := protojson.Marshal(pred)
		if err != nil {
			return nil, err
		}
		ps = &structpb.Struct{}
		if err := protojson.Unmarshal(raw, ps); err != nil {
			return nil, err
		}
	}
	sorted := append([]Subject(nil), subjects...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	st := &intoto.Statement{Type: intoto.StatementTypeUri, PredicateType: predicateType, Predicate: ps}
	for _, s := range sorted {
		st.Subject = append(st.Subject, &intoto.ResourceDescriptor{Name: s.Name, Digest: map[string]string{"sha256": s.SHA256}})
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	return protojson.Marshal(st)
}

// Attest signs a statement into a DSSE envelope (JSON, one line).
func Attest(s signature.Signer, statement []byte) ([]byte, error) {
	env, err := dsse.WrapSigner(s, InTotoPayload).SignMessage(bytes.NewReader(statement))
	if err != nil {
		return nil, fmt.Errorf("attest: %w", err)
	}
	return env, nil
}

// Statement is what a verified envelope says.
type Statement struct {
	PredicateType string
	Subjects      []Subject
	Predicate     json.RawMessage
}

// VerifyAttestation checks a DSSE envelope's signature and returns its
// statement; an error wraps ErrVerify.
func VerifyAttestation(v signature.Verifier, envelope []byte) (Statement, error) {
	var payload []byte
	w := dsse.WrapVerifier(v, dsse.WithExpectedPayloadType(InTotoPayload), dsse.WithDecodedPayload(&payload))
	if err := w.VerifySignature(bytes.NewReader(envelope), nil); err != nil {
		return Statement{}, fmt.Errorf("%w: dsse envelope: %v", ErrVerify, err)
	}
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return Statement{}, fmt.Errorf("%w: statement: %v", ErrVerify, err)
	}
	if err := st.Validate(); err != nil {
		return Statement{}, fmt.Errorf("%w: statement: %v", ErrVerify, err)
	}
	pred, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return Statement{}, err
	}
	out := Statement{PredicateType: st.GetPredicateType(), Predicate: pred}
	for _, s := range st.GetSubject() {
		out.Subjects = append(out.Subjects, Subject{Name: s.GetName(), SHA256: s.GetDigest()["sha256"]})
	}
	return out, nil
}

// Has reports whether the statement speaks for the digest (hex).
func (s Statement) Has(sha256 string) bool {
	for _, sub := range s.Subjects {
		if sub.SHA256 == sha256 {
			return true
		}
	}
	return false
}

// SignBlob signs data as cosign sign-blob does: the base64 of the
// signature over data.
func SignBlob(s signature.Signer, data []byte) ([]byte, error) {
	sig, err := s.SignMessage(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return []byte(base64.StdEncoding.EncodeToString(sig)), nil
}

// VerifyBlob checks a SignBlob signature (base64, surrounding space
// ignored); an error wraps ErrVerify.
func VerifyBlob(v signature.Verifier, data, sigB64 []byte) error {
	sig, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(sigB64)))
	if err != nil {
		return fmt.Errorf("%w: signature is not base64: %v", ErrVerify, err)
	}
	if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("%w: %v", ErrVerify, err)
	}
	return nil
}
