// Package kafkasec holds what the connections to a secured Kafka cluster
// share, so that the runtime, the handoff CLI and services built on them
// configure and report it the same way:
//
//   - [Dialer] opens a connection with TLS and SASL done, reporting what
//     retrying cannot fix (an untrusted certificate, rejected credentials,
//     a mechanism the broker does not enable) as a [*ConnectError] that
//     names the broker, the mechanism and the user, never the password;
//   - [Mechanism] builds kafka-go's PLAIN and SCRAM mechanisms from a name,
//     [Username] tells which user a mechanism authenticates as;
//   - [Options] are the command-line settings (-tls-ca, -tls-cert,
//     -tls-key, -tls, -sasl-mechanism, -sasl-username,
//     -sasl-password-file, else $KAFKA_SASL_PASSWORD), registered on a
//     flag.FlagSet by [Options.AddFlags] and turned into a *tls.Config and
//     a sasl.Mechanism by [Options.Load].
//
// Any other SASL mechanism plugs in as a kafka-go sasl.Mechanism: for
// Amazon MSK's IAM authentication, for instance, the signer of
// github.com/segmentio/kafka-go/sasl/aws_msk_iam_v2 (a separate module),
// with TLS on:
//
//	cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
//	cfg.SASL = &aws_msk_iam_v2.Mechanism{Signer: signer.NewSigner(), Credentials: awsCfg.Credentials, Region: "eu-west-1"}
package kafkasec
