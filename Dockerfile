# The Sluice operators image (`make image`): `python -m operators <name>`, one image for every
# operator. Two stages: the build stage resolves the locked, hash-checked wheels into a virtualenv;
# the runtime stage holds that virtualenv and nothing else (no pip cache, no build backend).
# The base is pinned to an exact Python patch release and Debian release; bump both on purpose.

FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/sluice
COPY requirements/runtime.lock /src/requirements/runtime.lock
RUN /opt/sluice/bin/pip install --require-hashes --only-binary=:all: \
        -r /src/requirements/runtime.lock
COPY pyproject.toml README.md /src/
COPY operators /src/operators
RUN /opt/sluice/bin/pip install --no-deps /src

FROM python:3.11.13-slim-bookworm
COPY --from=build /opt/sluice /opt/sluice
ENV PATH=/opt/sluice/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The "nonroot" uid/gid of distroless images; the manifests run the pods with the same ids.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["python", "-m", "operators"]
CMD ["all"]
