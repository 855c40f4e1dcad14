// TLS: with a certificate and key the server speaks HTTPS only, and presents that certificate.
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "tests/server/server_fixture.h"

using namespace runledger;
using runledger::testing::raw_exchange;
using runledger::testing::ServerFixture;
using runledger::testing::tls_request;
namespace fs = std::filesystem;

namespace {

// A fresh P-256 key and a self-signed certificate for 127.0.0.1, as PEM files in a directory of
// their own (removed with it): made here so that the test needs no openssl executable.
struct SelfSigned {
  fs::path dir = fs::temp_directory_path() / ("runledger-tls-" + random_uuid());
  fs::path cert = dir / "cert.pem";
  fs::path key = dir / "key.pem";

  SelfSigned() {
    fs::create_directories(dir);
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(EVP_EC_gen("P-256"), EVP_PKEY_free);
    REQUIRE(pkey);
    std::unique_ptr<X509, decltype(&X509_free)> x509(X509_new(), X509_free);
    X509_set_version(x509.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x509.get()), 1);
    X509_gmtime_adj(X509_getm_notBefore(x509.get()), -60);
    X509_gmtime_adj(X509_getm_notAfter(x509.get()), 24 * 3600);
    X509_set_pubkey(x509.get(), pkey.get());
    X509_NAME* name = X509_get_subject_name(x509.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
    X509_set_issuer_name(x509.get(), name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x509.get(), x509.get(), nullptr, nullptr, 0);
    X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "IP:127.0.0.1");
    REQUIRE(san != nullptr);
    X509_add_ext(x509.get(), san, -1);
    X509_EXTENSION_free(san);
    REQUIRE(X509_sign(x509.get(), pkey.get(), EVP_sha256()) > 0);
    write(cert, [&](FILE* f) { return PEM_write_X509(f, x509.get()); });
    write(key, [&](FILE* f) {
      return PEM_write_PrivateKey(f, pkey.get(), nullptr, nullptr, 0, nullptr, nullptr);
    });
  }
  ~SelfSigned() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  template <class F>
  static void write(const fs::path& path, F&& emit) {
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    const int ok = emit(f);
    std::fclose(f);
    REQUIRE(ok == 1);
  }
};

server::Options tls_options(const SelfSigned& files) {
  server::Options o = ServerFixture::fast_options();
  o.tls_cert = files.cert;
  o.tls_key = files.key;
  return o;
}

}  // namespace

TEST_CASE("with a certificate and key the API is HTTPS only, and a bot claims over it") {
  SelfSigned files;
  ServerFixture f(tls_options(files));
  const std::uint16_t port = f.http->port();
  // The client trusts this certificate alone: the handshake proves the server presents it.
  const auto health = tls_request(port, files.cert, "GET", "/healthz");
  CHECK(health.status == 200);
  CHECK(health.headers.count("X-Request-Id") == 1);

  const auto refused = tls_request(port, files.cert, "POST", "/v1/runs/claim", "not-a-token",
                                   R"({"slot":"s","incarnation":")" + random_uuid() + R"("})");
  CHECK(refused.status == 401);
  const auto claim = tls_request(port, files.cert, "POST", "/v1/runs/claim", f.bot_token,
                                 R"({"slot":"s","incarnation":")" + random_uuid() + R"("})");
  CHECK(claim.status == 200);
  CHECK(claim.json()["runs"].empty());

  // Plain HTTP to the TLS port gets no HTTP answer: the handshake fails and the server closes.
  const std::string plain = raw_exchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(plain.find("HTTP/1.1") == std::string::npos);
  // ...and the server goes on serving TLS clients.
  CHECK(tls_request(port, files.cert, "GET", "/healthz").status == 200);
}

TEST_CASE("a certificate without its key, or one that is not a certificate, is refused at start") {
  SelfSigned files;
  testing::TestDatabase db;
  pg::Pool pool(db.pool_options(2));

  server::Options only_cert = ServerFixture::fast_options();
  only_cert.port = 0;
  only_cert.tls_cert = files.cert;
  server::Server without_key(pool, db.url(), only_cert);
  try {
    without_key.start();
    FAIL("a certificate without a key was accepted");
  } catch (const InvalidArgument& e) {
    CHECK(e.details()["field"] == "tls_cert");
  }

  server::Options swapped = tls_options(files);
  swapped.port = 0;
  swapped.tls_cert = files.key;  // a key where the certificate should be
  server::Server not_a_cert(pool, db.url(), swapped);
  try {
    not_a_cert.start();
    FAIL("a key file was accepted as a certificate");
  } catch (const InvalidArgument& e) {
    CHECK(e.details()["field"] == "tls_cert");
    CHECK(std::string(e.what()).find("BEGIN") == std::string::npos);  // no key material echoed
  }
}
