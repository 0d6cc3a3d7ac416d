FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY sparkops sparkops
COPY dashboard dashboard
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir . && python manage.py collectstatic --noinput -v0 || true
EXPOSE 8000
CMD ["uvicorn", "sparkops.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
